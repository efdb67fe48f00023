package controllers_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/internal/operator/operatortest"
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

func deleteFencedResource(t *testing.T, key types.NamespacedName) {
	t.Helper()
	fr := &fencingv1alpha1.FencedResource{}
	fr.Namespace, fr.Name = key.Namespace, key.Name
	if err := env.Client.Delete(t.Context(), fr); err != nil {
		t.Fatalf("deleting FencedResource %s: %v", key, err)
	}
}

// TestLeaseFinalizer: the operator protects a Lease while any FencedResource is bound to it and releases it
// when the last one is deleted; Leases nobody is bound to are left alone.
func TestLeaseFinalizer(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	a := newWorker(t, ns, "worker-a")
	lease := types.NamespacedName{Namespace: ns, Name: "orders-writer"}
	a.Acquire(t, ns, lease.Name, 1)
	first := declare(t, ns, "orders", lease.Name)
	second := declare(t, ns, "invoices", lease.Name)

	// A Lease of the same name in another namespace, with a resource bound to a third Lease beside it.
	other := env.Namespace(t)
	newWorker(t, other, "worker-a").Acquire(t, other, lease.Name, 1)
	declare(t, other, "unrelated", "another-writer")

	eventually(t, "the bound lease gets the finalizer", func() (bool, string) {
		_, fin, seen := protected(t, lease)
		return fin, seen
	})
	if _, fin, seen := protected(t, types.NamespacedName{Namespace: other, Name: lease.Name}); fin {
		t.Errorf("a lease nothing is bound to was protected: %s", seen)
	}

	deleteFencedResource(t, first)
	consistently(t, "the finalizer stays while "+second.Name+" is bound", 2*time.Second, func() (bool, string) {
		_, fin, seen := protected(t, lease)
		return fin, seen
	})

	deleteFencedResource(t, second)
	eventually(t, "the finalizer is removed once no resource is bound", func() (bool, string) {
		exists, fin, seen := protected(t, lease)
		return exists && !fin, seen
	})
}

// TestLeaseDeleteWhileBound: deleting a Lease that resources are bound to leaves it Terminating (its
// epochs are still what they compare against) until the last bound resource is gone.
func TestLeaseDeleteWhileBound(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a := newWorker(t, ns, "worker-a")
	lease := types.NamespacedName{Namespace: ns, Name: "orders-writer"}
	a.Acquire(t, ns, lease.Name, 2)
	key := declare(t, ns, "orders", lease.Name)
	eventually(t, "the bound lease gets the finalizer", func() (bool, string) {
		_, fin, seen := protected(t, lease)
		return fin, seen
	})
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
	eventually(t, "the lease is gone once its last resource is", func() (bool, string) {
		exists, _, seen := protected(t, lease)
		return !exists, seen
	})
}
