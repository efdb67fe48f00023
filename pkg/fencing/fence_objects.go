package fencing

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// FenceObjectsOnAcquire returns an elector.Config.PostAcquire hook that does for the objects declared by
// FencingPolicies what FenceOnAcquire does for FencedResources: before the elector hands leadership to user
// code, it raises the epoch record (annotation fencing.fencekit.io/epoch) of every object that a
// FencingPolicy bound to the acquired Lease declares, with one merge patch each that presents the new token.
// From then on a write by an earlier holder is refused by the per-object rule (new == presented >= stored),
// even one whose Lease read came before the acquisition and whose commit comes after it: the apiserver
// re-runs admission when its compare-and-swap loses to the raise.
//
// reader lists the policies and the objects straight from the apiserver (mgr.GetAPIReader(): a cache could
// miss an object created a moment ago); c writes (a plain client: the elector has not handed out the token
// yet) and resolves resources with its RESTMapper. The hook needs list on fencingpolicies and on the
// declared resources. Raising N objects takes 1 + M + N requests (M declared resources). An object already
// at the epoch is left alone; one above it fails the acquisition (it was written at an epoch this Lease never
// issued after the new one).
func FenceObjectsOnAcquire(c client.Client, reader client.Reader) func(ctx context.Context, token elector.Token) error {
	return func(ctx context.Context, token elector.Token) error {
		var policies fencingv1alpha1.FencingPolicyList
		if err := reader.List(ctx, &policies, client.InNamespace(token.Lease.Namespace)); err != nil {
			return fmt.Errorf("listing the FencingPolicies of namespace %s: %w", token.Lease.Namespace, err)
		}
		var objects []*unstructured.Unstructured
		for _, p := range policies.Items {
			if p.Spec.LeaseName != token.Lease.Name {
				continue
			}
			for _, e := range p.Spec.Resources {
				found, err := declared(ctx, c, reader, token.Lease.Namespace, e)
				if err != nil {
					return fmt.Errorf("listing the objects FencingPolicy %s declares: %w", p.Name, err)
				}
				objects = append(objects, found...)
			}
		}
		errs := make([]error, len(objects))
		workqueue.ParallelizeUntil(ctx, fenceWorkers, len(objects), func(i int) {
			errs[i] = raiseObject(ctx, c, objects[i], token)
		})
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("fencing %d objects declared for lease %s at epoch %d: %w", len(objects), token.Lease, token.Epoch, err)
		}
		return ctx.Err()
	}
}

// FenceObjectsOnAcquireForConfig returns FenceObjectsOnAcquire's hook with one client of its own for both
// reads and writes (uncached, with its own RESTMapper), built from a copy of cfg without client-side rate
// limiting, as FenceOnAcquireForConfig does: for a controller-runtime manager, pass mgr.GetConfig().
func FenceObjectsOnAcquireForConfig(cfg *rest.Config) (func(ctx context.Context, token elector.Token) error, error) {
	c, err := fenceClient(cfg)
	if err != nil {
		return nil, err
	}
	return FenceObjectsOnAcquire(c, c), nil
}

// declared lists the objects of one policy entry in namespace.
func declared(ctx context.Context, c client.Client, reader client.Reader, namespace string, e fencingv1alpha1.FencedObjects) ([]*unstructured.Unstructured, error) {
	gvk, err := c.RESTMapper().KindFor(schema.GroupVersionResource{Group: e.Group, Resource: e.Resource})
	if err != nil {
		return nil, err
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.InNamespace(namespace)}
	if e.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(e.Selector)
		if err != nil {
			return nil, err
		}
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	if err := reader.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		list.Items[i].SetGroupVersionKind(gvk)
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func raiseObject(ctx context.Context, c client.Client, u *unstructured.Unstructured, token elector.Token) error {
	if raw, ok := u.GetAnnotations()[fencingv1alpha1.ObjectEpochAnnotation]; ok {
		switch stored, err := strconv.ParseInt(raw, 10, 64); {
		case err == nil && stored == token.Epoch:
			return nil // already fenced at this epoch
		case err == nil && stored > token.Epoch:
			return errorf(ReasonFutureEpoch, u.GetNamespace()+"/"+u.GetName(), token.Lease.Name, stored, token.Epoch,
				"%s %s/%s was written at epoch %d, above lease %s's new epoch %d: it cannot be fenced at %d",
				u.GetKind(), u.GetNamespace(), u.GetName(), stored, token.Lease, token.Epoch, token.Epoch)
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, fencingv1alpha1.ObjectEpochAnnotation, strconv.FormatInt(token.Epoch, 10))
	err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner(token.FieldManager()))
	if apierrors.IsNotFound(err) {
		return nil // deleted meanwhile: nothing left to fence
	}
	return err
}
