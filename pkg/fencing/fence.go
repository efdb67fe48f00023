package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// fenceWorkers bounds the concurrent writes of one fence-on-acquire.
const fenceWorkers = 16

// FenceOnAcquire returns an elector.Config.PostAcquire hook that raises every FencedResource bound to the
// acquired Lease to the new epoch before the elector hands leadership to user code (as an HDFS NameNode
// opens a new epoch on its journal before writing). From then on, a write by any earlier holder is refused
// by the apiserver, even if the new holder never writes.
//
// The resources are listed straight from the apiserver (c should not read from a cache that could miss a
// just-created resource) by the CRD's selectable field spec.leaseName, and each is raised with one patch:
// fencing N resources takes 1 + N requests, and Kubernetes has no request that writes several objects. So
// give c's rest.Config a QPS limit to match: client-side rate limiting lets (1 + N - Burst) / QPS seconds
// pass before the last request is sent, and client-go's default (5 QPS, burst 10) fits about 55 resources
// in the elector's default PostAcquireTimeout of 10 s, not 100 (18 s measured). controller-runtime's
// GetConfig turns client-side rate limiting off (the apiserver's priority and fairness applies instead),
// and 100 resources then take about 0.3 s (docs/benchmarks.md).
// The hook fails, and the elector does not report leadership, if any resource could not be raised; the
// elector bounds it in time.
func FenceOnAcquire(c client.Client) func(ctx context.Context, token elector.Token) error {
	return func(ctx context.Context, token elector.Token) error {
		var list fencingv1alpha1.FencedResourceList
		if err := c.List(ctx, &list, client.InNamespace(token.Lease.Namespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.leaseName", token.Lease.Name)}); err != nil {
			return fmt.Errorf("listing FencedResources bound to lease %s: %w", token.Lease, err)
		}
		errs := make([]error, len(list.Items))
		workqueue.ParallelizeUntil(ctx, fenceWorkers, len(list.Items), func(i int) {
			errs[i] = raise(ctx, c, &list.Items[i], token)
		})
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("fencing %d FencedResources bound to lease %s at epoch %d: %w", len(list.Items), token.Lease, token.Epoch, err)
		}
		return ctx.Err()
	}
}

// raise sets fr's epoch (and writer) to the token's with one JSON merge patch that presents the token as
// its field manager, leaving data as it is. The patch carries no resourceVersion: the apiserver itself
// refuses it if the resource has moved past the epoch (the CRD rule) or the token is not the Lease's current
// one (the webhook), so a concurrent status update by the operator cannot make it fail with a conflict.
//
// A resource already at the token's epoch is left alone (this acquisition fenced it already). A resource
// *above* it fails the acquisition: it has admitted an epoch the Lease never issued after this one (an
// admin's edit, or a Lease deleted and recreated by hand with a lower epoch), so no holder of this Lease can
// write it, and reporting leadership would hand out a token the resource refuses. docs/design.md says how
// to repair it.
func raise(ctx context.Context, c client.Client, fr *fencingv1alpha1.FencedResource, token elector.Token) error {
	switch {
	case fr.Spec.Epoch == token.Epoch:
		return nil // already fenced at this epoch
	case fr.Spec.Epoch > token.Epoch:
		return errorf(ReasonFutureEpoch, fr.Namespace+"/"+fr.Name, fr.Spec.LeaseName, fr.Spec.Epoch, token.Epoch,
			"FencedResource %s/%s is at epoch %d, above lease %s's new epoch %d: it cannot be fenced at %d (see \"A resource ahead of its Lease\" in fencekit's design)",
			fr.Namespace, fr.Name, fr.Spec.Epoch, token.Lease, token.Epoch, token.Epoch)
	}
	if err := checkBinding(fr, token); err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{fencingv1alpha1.WriterAnnotation: token.Holder}},
		"spec":     map[string]any{"epoch": token.Epoch},
	})
	if err != nil {
		return err
	}
	err = c.Patch(ctx, fr, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(token.FieldManager()))
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile: nothing left to fence
	}
	return err
}
