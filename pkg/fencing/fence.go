package fencing

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/util/retry"
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
// just-created resource) by the CRD's selectable field spec.leaseName. The hook fails, and the elector does
// not report leadership, if any resource could not be raised; the elector bounds it in time.
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

// raise sets fr's epoch to token.Epoch unless it is already there; data is left as it is.
func raise(ctx context.Context, c client.Client, fr *fencingv1alpha1.FencedResource, token elector.Token) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if fr.Spec.Epoch >= token.Epoch {
			return nil // already fenced at this epoch (or the Lease was recreated below it; admission decides writes)
		}
		if err := checkBinding(fr, token); err != nil {
			return err
		}
		stamp(fr, token)
		err := c.Update(ctx, fr)
		if apierrors.IsConflict(err) {
			if gerr := c.Get(ctx, client.ObjectKeyFromObject(fr), fr); gerr != nil {
				return gerr
			}
		}
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: nothing left to fence
		}
		return err
	})
}
