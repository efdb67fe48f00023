package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
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
