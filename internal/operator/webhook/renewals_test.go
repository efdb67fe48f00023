package webhook

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/protocol"
)

func TestRenewalsTimeWhatTheWebhookReads(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	lease := func(rv, holder, epoch string, renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", ResourceVersion: rv, Annotations: map[string]string{protocol.EpochAnnotation: epoch}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: ptr.To(metav1.NewMicroTime(renewed))}}
	}
	// The holder's clock is a minute behind the webhook's.
	behind := start.Add(-time.Minute)
	r := &renewals{}
	steps := []struct {
		what string
		l    *coordinationv1.Lease
		now  time.Time
		want time.Time
	}{
		{"the first reading of a Lease observes no renewal", lease("10", "a", "3", behind), start, time.Time{}},
		{"the same renewal read again", lease("10", "a", "3", behind), start.Add(time.Second), time.Time{}},
		{"a later renewal is observed when first read", lease("12", "a", "3", behind.Add(2*time.Second)), start.Add(3 * time.Second), start.Add(3 * time.Second)},
		{"read again later, it keeps the time it was first read", lease("12", "a", "3", behind.Add(2*time.Second)), start.Add(5 * time.Second), start.Add(3 * time.Second)},
		{"a write that leaves the renewal as it was keeps its time", lease("13", "a", "3", behind.Add(2*time.Second)), start.Add(6 * time.Second), start.Add(3 * time.Second)},
		// A reading taken before the renewal, of the same term, decided after the newer one was read: the
		// holder was live when that was read.
		{"a lagging reading of an older renewal of the term keeps the newer one's time", lease("10", "a", "3", behind), start.Add(7 * time.Second), start.Add(3 * time.Second)},
		{"a lagging reading of an earlier term observes none", lease("9", "z", "2", behind), start.Add(7 * time.Second), time.Time{}},
		{"and does not replace the newer one", lease("13", "a", "3", behind.Add(2*time.Second)), start.Add(8 * time.Second), start.Add(3 * time.Second)},
		{"an acquisition by another holder is a renewal", lease("20", "b", "4", behind.Add(9*time.Second)), start.Add(9 * time.Second), start.Add(9 * time.Second)},
		{"a Lease that does not exist observes none", nil, start.Add(10 * time.Second), time.Time{}},
	}
	for _, s := range steps {
		if got := r.observe(s.l, s.now); !got.Equal(s.want) {
			t.Errorf("%s: observed renewal %v, want %v", s.what, got, s.want)
		}
	}
}

func TestRenewalsForgetRunOutLeasesBeyondTheBound(t *testing.T) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	r := &renewals{}
	for i := range maxRenewals + 1 {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l" + string(rune('a'+i%26)) + time.Duration(i).String(), ResourceVersion: "1"},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](15)}}
		r.observe(l, start)
	}
	if n := len(r.seen); n > maxRenewals {
		t.Errorf("renewals remembers %d Leases after %d were read once, want at most %d", n, maxRenewals+1, maxRenewals)
	}
}
