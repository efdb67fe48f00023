package controllers_test

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestStatusLifecycle follows one FencedResource's status through its life, as a user reading
// `kubectl get fr` would: declared before its Lease exists, the Lease acquired, the holder's write, a new
// holder's acquisition, that holder's fence-on-acquire, and a Lease whose epoch was corrupted.
func TestStatusLifecycle(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key := declare(t, ns, "orders", "orders-writer")

	eventuallyStatus(t, "declared with no lease: LeaseFound False (LeaseNotFound), Ready False", key,
		fencingv1alpha1.FencedResourceStatus{Conditions: leaseNotFound(ns)})

	ta := a.Acquire(t, ns, "orders-writer", 3)
	eventuallyStatus(t, "lease acquired at epoch 3: LeaseFound True, Fenced False (BehindLease)", key,
		fencingv1alpha1.FencedResourceStatus{LeaseEpoch: 3, LeaseHolder: "worker-a", Conditions: behindLease("0", "3")})
	testenv.Eventually(t, "the lease created after the resource was declared gets the finalizer", func() (bool, string) {
		_, fin, seen := protected(t, types.NamespacedName{Namespace: ns, Name: "orders-writer"})
		return fin, seen
	})

	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a3"}); err != nil {
		t.Fatalf("the holder's write at epoch 3: %v", err)
	}
	fr := eventuallyStatus(t, "the holder wrote at epoch 3: Fenced True (AtLeaseEpoch), Ready True", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 3, LeaseHolder: "worker-a",
			Conditions: atLeaseEpoch("3")})
	if fr.Generation < 2 || fr.Status.ObservedGeneration != fr.Generation {
		t.Errorf("observedGeneration %d, generation %d: want the generation of the write", fr.Status.ObservedGeneration, fr.Generation)
	}

	tb := b.Acquire(t, ns, "orders-writer", 4)
	eventuallyStatus(t, "worker-b acquired epoch 4: BehindLease until fenced", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 4, LeaseHolder: "worker-b",
			Conditions: behindLease("3", "4")})

	// worker-b's elector fences the resource (fence-on-acquire) without writing data.
	if err := fencing.FenceOnAcquire(b.Client).Raise(ctx, tb); err != nil {
		t.Fatalf("fencing at epoch 4: %v", err)
	}
	fr = eventuallyStatus(t, "fenced at epoch 4: Fenced True again", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 4, Holder: "worker-b", LeaseEpoch: 4, LeaseHolder: "worker-b",
			Conditions: atLeaseEpoch("4")})
	if string(fr.Spec.Data.Raw) != `{"v":"a3"}` {
		t.Errorf("data %s after fencing, want worker-a's {\"v\":\"a3\"} untouched", fr.Spec.Data.Raw)
	}

	// An admin (the Lease policy does not apply to system:masters) corrupts the epoch.
	var lease coordinationv1.Lease
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders-writer"}, &lease); err != nil {
		t.Fatal(err)
	}
	lease.Annotations[elector.EpochAnnotation] = "garbage"
	if err := env.Client.Update(ctx, &lease); err != nil {
		t.Fatal(err)
	}
	eventuallyStatus(t, "the lease's epoch is garbage: LeaseFound False (LeaseInvalid)", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 4, Holder: "worker-b", LeaseHolder: "worker-b",
			Conditions: leaseInvalid(`its fencing.fencekit.io/epoch annotation "garbage" is not an epoch >= 1`)})
}
