package controllers

import (
	"context"
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// LeaseNameField indexes FencedResources by spec.leaseName in the operator's cache (the same name as the
// CRD's selectable field, so that cached and uncached lists read alike).
const LeaseNameField = "spec.leaseName"

// IndexLeaseName registers the spec.leaseName index on indexer.
func IndexLeaseName(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &fencingv1alpha1.FencedResource{}, LeaseNameField, func(o client.Object) []string {
		return []string{o.(*fencingv1alpha1.FencedResource).Spec.LeaseName}
	})
}

// boundTo lists the FencedResources bound to the Lease namespace/name, from the cache.
func boundTo(ctx context.Context, c client.Reader, namespace, lease string) ([]fencingv1alpha1.FencedResource, error) {
	var list fencingv1alpha1.FencedResourceList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{LeaseNameField: lease}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// leaseChanges passes a Lease update only if it changes what the controllers read: the holder, the epoch
// annotation, the finalizers or the deletion. A renewal (renewTime) changes none of them, so the holder's
// renewal every RetryPeriod does not make the controllers reconcile every bound FencedResource.
var leaseChanges = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*coordinationv1.Lease)
		lease, ok2 := e.ObjectNew.(*coordinationv1.Lease)
		if !ok1 || !ok2 {
			return true
		}
		return ptr.Deref(old.Spec.HolderIdentity, "") != ptr.Deref(lease.Spec.HolderIdentity, "") ||
			old.Annotations[protocol.EpochAnnotation] != lease.Annotations[protocol.EpochAnnotation] ||
			!slices.Equal(old.Finalizers, lease.Finalizers) ||
			!old.DeletionTimestamp.Equal(lease.DeletionTimestamp)
	},
}
