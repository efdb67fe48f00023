package elector

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// A request's answer reaches the elector without its managedFields, with the request's error, and shares
// with the version the elector holds the annotations it has equal.
func TestAnswerIsTrimmedAndSharesTheHeldVersion(t *testing.T) {
	o := newObserver("l", clocktesting.NewFakePassiveClock(metav1.Now().Time))
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", UID: "u1", ResourceVersion: "6",
		Annotations: map[string]string{protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: "alice"}}}
	o.set(held)
	q := leaseRequests{obs: o}
	sent := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Annotations:   map[string]string{protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: "alice"},
		Labels:        map[string]string{protocol.FencedLabel: "true"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "fencing.fencekit.io/epoch=3"}}}}
	errConflict := errors.New("conflict")
	got, err := q.answer(func() (*coordinationv1.Lease, error) { return sent, errConflict })
	if got != sent || !errors.Is(err, errConflict) {
		t.Fatalf("answer returned %v, %v; want the request's Lease and error", got, err)
	}
	if got.ManagedFields != nil {
		t.Errorf("managedFields %v kept, want none", got.ManagedFields)
	}
	if !sameMap(got.Annotations, held.Annotations) {
		t.Errorf("the answer's annotations %v are a map of their own, want the held version's", got.Annotations)
	}
	if !sameMap(got.Labels, fencedLabels) {
		t.Errorf("the answer's labels %v are a map of their own, want the shared fenced labels", got.Labels)
	}
	if got.ResourceVersion != "7" {
		t.Errorf("resourceVersion %q, want the answer's 7", got.ResourceVersion)
	}
	if got, err := q.answer(func() (*coordinationv1.Lease, error) { return nil, errConflict }); got != nil || !errors.Is(err, errConflict) {
		t.Errorf("answer of a failed request: %v, %v; want nil, the error", got, err)
	}
}

// A fresh version shares the held version's name, namespace, uid and annotations map only when they are
// equal, and only with a version of the same object; what it shares keeps its own values.
func TestShareHeld(t *testing.T) {
	annotations := func(epoch string) map[string]string {
		return map[string]string{protocol.EpochAnnotation: epoch, protocol.AcquirerAnnotation: "alice"}
	}
	version := func(uid types.UID, epoch string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", UID: uid, ResourceVersion: "9",
			Annotations: annotations(epoch)}}
	}
	held := version("u1", "3")
	cases := []struct {
		name  string
		fresh *coordinationv1.Lease
		held  *coordinationv1.Lease
		share bool
	}{
		{"a renewal", version("u1", "3"), held, true},
		{"an acquisition at another epoch", version("u1", "4"), held, false},
		{"the Lease deleted and created again", version("u2", "3"), held, false},
		{"nothing held", version("u1", "3"), nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := maps.Clone(tc.fresh.Annotations)
			shareHeld(tc.fresh, tc.held)
			if shared := tc.held != nil && sameMap(tc.fresh.Annotations, tc.held.Annotations); shared != tc.share {
				t.Errorf("annotations shared = %t, want %t", shared, tc.share)
			}
			if !maps.Equal(tc.fresh.Annotations, want) || tc.fresh.Name != "l" || tc.fresh.Namespace != "ns" || tc.fresh.ResourceVersion != "9" {
				t.Errorf("the fresh version changed: %+v, annotations want %v", tc.fresh.ObjectMeta, want)
			}
			if !maps.Equal(held.Annotations, annotations("3")) {
				t.Errorf("the held version changed: %v", held.Annotations)
			}
		})
	}
}

// A renewal shares the held Lease's maps and writes nothing of it: the held version, which the observer
// and the informer's store hold too, is unchanged, and the renewal carries the new renewTime and
// leaseDurationSeconds.
func TestRenewalLeavesTheHeldLeaseAsItWas(t *testing.T) {
	acquired := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Labels:      map[string]string{protocol.FencedLabel: "true"},
		Annotations: map[string]string{protocol.EpochAnnotation: "3"}}}
	applyAcquisition(held, acquisition{identity: "a", acquirer: "a", epoch: 3, leaseDuration: 15 * time.Second, now: acquired})
	before := held.DeepCopy()
	renewed := acquired.Add(2 * time.Second)
	l := renewalOf(held, renewed, 20*time.Second)
	if diff := cmp.Diff(before, held); diff != "" {
		t.Errorf("the held Lease changed with its renewal (-before +after):\n%s", diff)
	}
	if got := l.Spec.RenewTime; got == nil || !got.Time.Equal(renewed) {
		t.Errorf("the renewal's renewTime is %v, want %v", got, renewed)
	}
	if got := l.Spec.LeaseDurationSeconds; got == nil || *got != 20 {
		t.Errorf("the renewal's leaseDurationSeconds is %v, want 20", got)
	}
	if l.Spec.AcquireTime != held.Spec.AcquireTime || l.Spec.HolderIdentity != held.Spec.HolderIdentity {
		t.Errorf("the renewal does not carry the held holder and acquireTime: %+v", l.Spec)
	}
}
