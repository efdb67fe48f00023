package admission

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// A holder whose clock is behind the webhook's renews with a renewTime in the webhook's past: the renewal
// the webhook observed keeps the Lease live for its duration from then, so the holder's writes are
// admitted and a delete without the token refused, as its standbys (which time what they observe) still
// see it lead. Without an observed renewal, renewTime alone decides.
func TestExpiryTakesTheObservedRenewal(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	lease := func(renewed, observed time.Time) *Lease {
		return &Lease{Name: "l", Epoch: 3, Holder: "h", Acquirer: "u", Fenced: true, Duration: 15 * time.Second,
			RenewTime: renewed, ObservedRenewal: observed, Source: Quorum}
	}
	frAt := func(epoch int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fencing.fencekit.io/v1alpha1", "kind": "FencedResource",
			"metadata": map[string]any{"name": "orders", "namespace": "ns", "annotations": map[string]any{"fencing.fencekit.io/writer": "h"}},
			"spec":     map[string]any{"leaseName": "l", "epoch": epoch, "data": map[string]any{"v": int64(1)}}}}
	}
	behind := now.Add(-time.Minute)
	for name, tc := range map[string]struct {
		lease      *Lease
		live       bool
		holderErr  protocol.Reason // the holder's write at epoch 3
		cleanerErr protocol.Reason // a DELETE by a user without the token
	}{
		"renewed a minute behind, observed 2 s ago":     {lease: lease(behind, now.Add(-2*time.Second)), live: true, cleanerErr: protocol.ReasonNotHolder},
		"renewed a minute behind, never observed":       {lease: lease(behind, time.Time{}), holderErr: protocol.ReasonNotHolder},
		"renewed a minute behind, observed 16 s ago":    {lease: lease(behind, now.Add(-16*time.Second)), holderErr: protocol.ReasonNotHolder},
		"renewed 2 s ago by the webhook's clock":        {lease: lease(now.Add(-2*time.Second), time.Time{}), live: true, cleanerErr: protocol.ReasonNotHolder},
		"renewed 2 s ago, an older renewal observed":    {lease: lease(now.Add(-2*time.Second), now.Add(-30*time.Second)), live: true, cleanerErr: protocol.ReasonNotHolder},
		"renewed ahead of the webhook's clock, in time": {lease: lease(now.Add(10*time.Second), time.Time{}), live: true, cleanerErr: protocol.ReasonNotHolder},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.lease.Live(now); got != tc.live {
				t.Errorf("Live = %v, want %v (expiry %s, now %s)", got, tc.live, tc.lease.Expiry(), now)
			}
			write := &Request{Class: FencedResource, Operation: Update, User: User{Name: "u"}, Kind: "FencedResource", Namespace: "ns", Name: "orders",
				Old: frAt(3), New: frAt(3), LeaseName: "l", FieldManager: protocol.FieldManagerFor(3)}
			write.New.Object["spec"].(map[string]any)["data"] = map[string]any{"v": int64(2)}
			del := &Request{Class: FencedResource, Operation: Delete, User: User{Name: "cleaner"}, Kind: "FencedResource", Namespace: "ns", Name: "orders",
				Old: frAt(3), LeaseName: "l"}
			for _, c := range []struct {
				what string
				r    *Request
				want protocol.Reason
			}{{"the holder's write", write, tc.holderErr}, {"a delete without the token", del, tc.cleanerErr}} {
				c.r.Complete()
				v := Decide(c.r, tc.lease, now)
				var got protocol.Reason
				if v.Err != nil {
					got = v.Err.Reason
				}
				if v.Need != Decided || got != c.want {
					t.Errorf("%s: verdict %+v, want reason %q", c.what, v, c.want)
				}
			}
		})
	}
}
