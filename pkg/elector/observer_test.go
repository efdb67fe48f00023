package elector

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// A standby times the holder's renewals: a version of the Lease that changes only what a renewal does not
// (a label, a finalizer) keeps the time the current renewal was first seen, so writes of other fields
// cannot keep a dead holder's Lease from expiring; a renewal, a release or an acquisition restarts it.
func TestObserverTimesRenewalsOnly(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	o := newObserver("l", clk)
	renewed := metav1.NewMicroTime(start)
	lease := func(rv, holder, epoch string, renew metav1.MicroTime, labels map[string]string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: rv, Labels: labels,
			Annotations: map[string]string{protocol.EpochAnnotation: epoch}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &renew}}
	}
	steps := []struct {
		what   string
		after  time.Duration
		l      *coordinationv1.Lease
		wantAt time.Duration // since start
	}{
		{"the first version", 0, lease("10", "a", "3", renewed, nil), 0},
		{"a label write", 5 * time.Second, lease("11", "a", "3", renewed, map[string]string{"x": "1"}), 0},
		{"another label write", 5 * time.Second, lease("12", "a", "3", renewed, map[string]string{"x": "2"}), 0},
		{"a renewal", 2 * time.Second, lease("13", "a", "3", metav1.NewMicroTime(start.Add(12*time.Second)), map[string]string{"x": "2"}), 12 * time.Second},
		{"a release", 1 * time.Second, lease("14", "", "3", metav1.NewMicroTime(start.Add(12*time.Second)), nil), 13 * time.Second},
		{"an acquisition", 1 * time.Second, lease("15", "b", "4", metav1.NewMicroTime(start.Add(14*time.Second)), nil), 14 * time.Second},
	}
	for _, s := range steps {
		clk.SetTime(clk.Now().Add(s.after))
		o.set(s.l)
		got := o.get()
		if want := start.Add(s.wantAt); !got.at.Equal(want) {
			t.Errorf("%s: observed at %s, want %s", s.what, got.at.Sub(start), s.wantAt)
		}
		if got.lease.ResourceVersion != s.l.ResourceVersion {
			t.Errorf("%s: the observation holds version %s, want the latest, %s (the next compare-and-swap names it)", s.what, got.lease.ResourceVersion, s.l.ResourceVersion)
		}
	}
}

// The shared watch selects fenced Leases: a Lease whose fenced label is removed leaves it as a deletion at
// the resourceVersion of that write. A read of the Lease at that resourceVersion then shows it exists; a
// version older than the deletion, or the one already held, changes nothing.
func TestObserverLeaseLeavingTheWatchIsReadBack(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	o := newObserver("l", clk)
	o.set(leaseAt("10"))
	o.set(leaseAt("10"))
	if got := o.get(); got.lease == nil || got.lease.ResourceVersion != "10" {
		t.Fatalf("observed %+v, want the Lease at 10", got.lease)
	}
	o.deleted("12")
	if got := o.get(); got.lease != nil {
		t.Fatalf("observed %+v after the deletion at 12, want none", got.lease)
	}
	o.set(leaseAt("11"))
	if got := o.get(); got.lease != nil {
		t.Fatalf("a version older than the deletion rolled the view back: %+v", got.lease)
	}
	o.set(leaseAt("12"))
	if got := o.get(); got.lease == nil || got.lease.ResourceVersion != "12" {
		t.Fatalf("observed %+v, want the Lease read back at 12", got.lease)
	}
}

// The watch delivering the version the elector's own write returned replaces the recorded copy with its
// own (which the informer holds anyway) and wakes the loop to take it as its base; the time it was first
// seen stays. The elector's answer at a version the watch delivered first is ignored.
func TestObserverKeepsTheWatchsCopyOfAVersion(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	o := newObserver("l", clk)
	answer := leaseAt("10")
	o.set(answer)
	<-o.notify
	clk.SetTime(t0.Add(time.Second))
	fromWatch := leaseAt("10")
	o.watched(fromWatch)
	got := o.get()
	if got.lease != fromWatch || !got.at.Equal(t0) {
		t.Fatalf("after the watch delivered version 10: holds the watch's copy %t, first seen %s; want true, %s", got.lease == fromWatch, got.at, t0)
	}
	select {
	case <-o.notify:
	default:
		t.Error("the watch's copy of the version held did not wake the loop to take it")
	}
	o.watched(fromWatch)
	select {
	case <-o.notify:
		t.Error("the watch's copy delivered again (a resync) woke the loop")
	default:
	}
	o.set(leaseAt("10"))
	if o.get().lease != fromWatch {
		t.Error("the elector's answer at the version the watch delivered replaced the watch's copy")
	}
	acquired := leaseAt("11")
	acquired.Spec.HolderIdentity = ptr.To("b")
	o.watched(acquired)
	if got := o.get(); got.lease != acquired || !got.at.Equal(t0.Add(time.Second)) {
		t.Errorf("an acquisition from the watch: holds it %t, first seen %s; want true, %s", got.lease == acquired, got.at, t0.Add(time.Second))
	}
}

// leaseAt is Lease "l" at resourceVersion rv, held by "a".
func leaseAt(rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: rv},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](15)}}
}
