package elector_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/fencekit/fencekit/pkg/elector"
)

// An availability attack on the fence-on-acquire declaration, not a fencing hole. The Lease policy lets
// anyone allowed to update the Lease add a kind to its declaration outside an acquisition (adding is safe
// for the webhooks' copy of the Lease), and refuses every later acquisition that does not declare that
// kind. So another workload with the fencekit-elector role adds "objects" to the Lease of an elector that
// fences FencedResources only: the holder keeps renewing (a renewal that conflicts rereads the Lease and
// renews on top, keeping the addition), but once it has released the Lease, no elector with its
// configuration can take it again until a break-glass user removes the kind. The test asserts this
// behaviour as it stands; closing it would take a policy rule that the declaration changes only in an
// acquisition.
func TestFencesDeclarationAddedByAnotherUser(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.Namespace(t)
	h := newHistory()
	hook := func(context.Context, elector.Token) error { return nil }
	cfg := shortConfig(t, ns, "lock", "a")
	cfg.Client = electorClientset(t, ns, "a-user")
	cfg.OnStartedLeading = h.lead
	cfg.PostAcquire, cfg.PostAcquireFences = hook, elector.Fences{FencedResources: true}
	a := start(t, cfg)
	first := h.wait(t, 30*time.Second)

	const both = "fencedresources,objects"
	leases := electorClientset(t, ns, "mallory-user").CoordinationV1().Leases(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, "lock", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Annotations[elector.FencesAnnotation] = both
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("another elector-role user adding objects to the declaration, presenting nothing: %v; the lock-out is closed, update this test", err)
	}
	renewed := getLease(t, ns, "lock").Spec.RenewTime.Time
	eventually(t, 10*time.Second, "the holder renews on top of the addition", func() bool {
		l := getLease(t, ns, "lock")
		return l.Spec.RenewTime.After(renewed) && l.Annotations[elector.FencesAnnotation] == both
	})
	if !a.e.IsLeader() {
		t.Fatal("the holder lost the Lease after the addition, want it still leading")
	}
	a.stop()

	var logs logLines
	start(t, cfg, elector.WithLogger(logs.logger()))
	eventually(t, 20*time.Second, "the policy refuses the holder's own configuration", func() bool {
		return logs.has("declares that every acquisition fences its FencingPolicy objects")
	})
	if l := getLease(t, ns, "lock"); holderOf(l) != "" || l.Annotations[elector.EpochAnnotation] != strconv.FormatInt(first.Epoch, 10) {
		t.Fatalf("holder %q at epoch %s, want the Lease released at %d", holderOf(l), l.Annotations[elector.EpochAnnotation], first.Epoch)
	}

	// Break glass (the test's admin) removes the kind: the same elector takes the Lease at the next epoch.
	admin := clientset(t).CoordinationV1().Leases(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := admin.Get(ctx, "lock", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Annotations[elector.FencesAnnotation] = "fencedresources"
		_, err = admin.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if second := h.wait(t, 30*time.Second); second.Holder != "a" || second.Epoch != first.Epoch+1 {
		t.Fatalf("got %v after break glass removed the kind, want a at epoch %d", second, first.Epoch+1)
	}
}
