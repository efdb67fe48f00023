package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// protected reports whether the Lease key exists and carries the operator's finalizer.
func protected(t *testing.T, key types.NamespacedName) (exists, finalizer bool, seen string) {
	l, err := getLease(t, key)
	if apierrors.IsNotFound(err) {
		return false, false, "lease not found"
	}
	if err != nil {
		return false, false, err.Error()
	}
	return true, slices.Contains(l.Finalizers, controllers.LeaseFinalizer),
		fmt.Sprintf("finalizers %v, deletionTimestamp %v", l.Finalizers, l.DeletionTimestamp)
}

// protectedIs is the condition that the Lease key exists and carries the operator's finalizer (want true)
// or exists without it (want false).
func protectedIs(t *testing.T, key types.NamespacedName, want bool) func() (bool, string) {
	return func() (bool, string) {
		exists, fin, seen := protected(t, key)
		return exists && fin == want, seen
	}
}

func deleteFencedResource(t *testing.T, key types.NamespacedName) {
	t.Helper()
	fr := &fencingv1alpha1.FencedResource{}
	fr.Namespace, fr.Name = key.Namespace, key.Name
	if err := env.Client.Delete(t.Context(), fr); err != nil {
		t.Fatalf("deleting FencedResource %s: %v", key, err)
	}
}

// boundLease runs the operator and gives t a namespace with the Lease orders-writer, acquired by worker-a
// at epoch, and a FencedResource of each of names bound to it.
func boundLease(t *testing.T, epoch int64, names ...string) (context.Context, types.NamespacedName, []types.NamespacedName) {
	t.Helper()
	ctx, ns := startOperator(t)
	lease := types.NamespacedName{Namespace: ns, Name: "orders-writer"}
	newWorker(t, ns, "worker-a").Acquire(t, ns, lease.Name, epoch)
	var keys []types.NamespacedName
	for _, name := range names {
		keys = append(keys, declare(t, ns, name, lease.Name))
	}
	return ctx, lease, keys
}

// TestLeaseFinalizer: the operator protects a Lease while any FencedResource is bound to it and releases it
// when the last one is deleted; Leases nobody is bound to are left alone.
func TestLeaseFinalizer(t *testing.T) {
	_, lease, bound := boundLease(t, 1, "orders", "invoices")
	first, second := bound[0], bound[1]

	// A Lease of the same name in another namespace, with a resource bound to a third Lease beside it.
	other := env.Namespace(t)
	newWorker(t, other, "worker-a").Acquire(t, other, lease.Name, 1)
	declare(t, other, "unrelated", "another-writer")

	testenv.Eventually(t, "the bound lease gets the finalizer", protectedIs(t, lease, true))
	if _, fin, seen := protected(t, types.NamespacedName{Namespace: other, Name: lease.Name}); fin {
		t.Errorf("a lease nothing is bound to was protected: %s", seen)
	}

	deleteFencedResource(t, first)
	consistently(t, "the finalizer stays while "+second.Name+" is bound", 2*time.Second, protectedIs(t, lease, true))

	deleteFencedResource(t, second)
	testenv.Eventually(t, "the finalizer is removed once no resource is bound", protectedIs(t, lease, false))
}

// TestLeaseDeleteWhileBound: deleting a Lease that resources are bound to leaves it Terminating (its
// epochs are still what they compare against) until the last bound resource is gone.
func TestLeaseDeleteWhileBound(t *testing.T) {
	ctx, lease, bound := boundLease(t, 2, "orders")
	key := bound[0]
	testenv.Eventually(t, "the bound lease gets the finalizer", protectedIs(t, lease, true))
	eventuallyStatus(t, "the resource reports the lease", key,
		fencingv1alpha1.FencedResourceStatus{LeaseEpoch: 2, LeaseHolder: "worker-a", Conditions: behindLease("0", "2")})

	l, err := getLease(t, lease)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, l); err != nil {
		t.Fatalf("deleting the lease: %v", err)
	}
	consistently(t, "the lease stays Terminating while a resource is bound", 2*time.Second, func() (bool, string) {
		l, err := getLease(t, lease)
		if err != nil {
			return false, err.Error()
		}
		return !l.DeletionTimestamp.IsZero() && slices.Contains(l.Finalizers, controllers.LeaseFinalizer),
			fmt.Sprintf("finalizers %v, deletionTimestamp %v", l.Finalizers, l.DeletionTimestamp)
	})
	// The terminating lease still fences: the resource still reports it.
	var fr fencingv1alpha1.FencedResource
	if err := env.Client.Get(ctx, key, &fr); err != nil {
		t.Fatal(err)
	}
	if fr.Status.LeaseEpoch != 2 {
		t.Errorf("status.leaseEpoch %d while the lease is terminating, want 2", fr.Status.LeaseEpoch)
	}

	if err := env.Client.Delete(ctx, &fr, client.Preconditions{UID: &fr.UID}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the lease is gone once its last resource is", func() (bool, string) {
		exists, _, seen := protected(t, lease)
		return !exists, seen
	})
}

// TestLeaseFinalizerOnlyOnFencedLeases: the operator protects only bound Leases labelled fenced (the policy
// <release>-operator-leases refuses it adding its finalizer to any other) and releases any Lease that is
// not both bound and labelled: one protected before the label was required, or one whose label an admin
// removed.
func TestLeaseFinalizerOnlyOnFencedLeases(t *testing.T) {
	ctx, ns := startOperator(t)
	plainLease := func(name string, finalizers ...string) types.NamespacedName {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "web"}, Finalizers: finalizers},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("web-0"), LeaseDurationSeconds: ptr.To[int32](15)}}
		if err := env.Client.Create(ctx, l); err != nil {
			t.Fatalf("creating lease %s/%s: %v", ns, name, err)
		}
		t.Cleanup(func() {
			// Let the namespace's Leases go whatever the test left on them.
			_ = env.Client.Patch(context.Background(), l, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		return client.ObjectKeyFromObject(l)
	}
	plain := plainLease("web-leader")
	declare(t, ns, "web", plain.Name)
	fenced := types.NamespacedName{Namespace: ns, Name: "orders-writer"}
	newWorker(t, ns, "worker-a").Acquire(t, ns, fenced.Name, 1)
	declare(t, ns, "orders", fenced.Name)
	// Protected before the protector required the label: bound, and unbound.
	oldBound := plainLease("legacy-writer", controllers.LeaseFinalizer)
	declare(t, ns, "legacy", oldBound.Name)
	oldUnbound := plainLease("legacy-idle", controllers.LeaseFinalizer)

	testenv.Eventually(t, "the bound fenced lease gets the finalizer", protectedIs(t, fenced, true))
	for _, key := range []types.NamespacedName{oldBound, oldUnbound} {
		testenv.Eventually(t, "the finalizer is removed from the unlabelled lease "+key.String(), protectedIs(t, key, false))
	}
	consistently(t, "the bound unlabelled lease is not protected", 2*time.Second, protectedIs(t, plain, false))

	// An admin (break-glass) removes the fenced label from the bound Lease: it is released.
	l, err := getLease(t, fenced)
	if err != nil {
		t.Fatal(err)
	}
	unlabelled := l.DeepCopy()
	delete(unlabelled.Labels, protocol.FencedLabel)
	if err := env.Client.Patch(ctx, unlabelled, client.MergeFrom(l)); err != nil {
		t.Fatalf("the admin removing the fenced label of %s: %v", fenced, err)
	}
	testenv.Eventually(t, "the finalizer is removed from the bound lease that lost its label", protectedIs(t, fenced, false))
}
