package fencing

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// Writer performs fenced writes of FencedResources with a lease holder's Token.
type Writer struct {
	client client.Client
}

// NewWriter returns a Writer that writes with c. The client's user must be the one the elector acquired
// the Lease as (the same credentials): fencekit admits a write only from the acquiring user.
func NewWriter(c client.Client) *Writer { return &Writer{client: c} }

// Mutation changes a FencedResource's data in place. data is never nil (an empty object when the resource
// has none yet). Returning an error aborts the write.
type Mutation func(data map[string]any) error

// Update reads the FencedResource key, applies mutate to its data and writes it back carrying token: epoch
// token.Epoch and writer token.Holder. A resourceVersion conflict (another write came first) is retried
// with a fresh read, always with the same token: the epoch is never changed to get a write through, and the
// decision stays with the apiserver, which refuses the write if the resource has moved to a later epoch.
// Refusals by fencekit come back as errors that IsStale, IsNotHolder and IsLeaseMissing recognise. On
// success the written resource is returned.
func (w *Writer) Update(ctx context.Context, token elector.Token, key types.NamespacedName, mutate Mutation) (*fencingv1alpha1.FencedResource, error) {
	if token.IsZero() {
		return nil, fmt.Errorf("writing FencedResource %s: no fencing token (not the leader)", key)
	}
	var fr fencingv1alpha1.FencedResource
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := w.client.Get(ctx, key, &fr); err != nil {
			return err
		}
		if err := checkBinding(&fr, token); err != nil {
			return err
		}
		data := map[string]any{}
		if fr.Spec.Data != nil && len(fr.Spec.Data.Raw) > 0 {
			if err := json.Unmarshal(fr.Spec.Data.Raw, &data); err != nil {
				return fmt.Errorf("decoding spec.data of FencedResource %s: %w", key, err)
			}
		}
		if err := mutate(data); err != nil {
			return err
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return fmt.Errorf("encoding spec.data of FencedResource %s: %w", key, err)
		}
		stamp(&fr, token)
		fr.Spec.Data = &runtime.RawExtension{Raw: raw}
		return w.client.Update(ctx, &fr)
	})
	if err != nil {
		return nil, wrap(key, token, err)
	}
	return &fr, nil
}

// Set replaces the FencedResource's data with data, carrying token (see Update).
func (w *Writer) Set(ctx context.Context, token elector.Token, key types.NamespacedName, data map[string]any) (*fencingv1alpha1.FencedResource, error) {
	return w.Update(ctx, token, key, func(d map[string]any) error {
		clear(d)
		for k, v := range data {
			d[k] = v
		}
		return nil
	})
}

// checkBinding refuses, before any write, a token for another Lease: such a write could never be fenced.
// Whether the epoch is current is the apiserver's decision, not the writer's.
func checkBinding(fr *fencingv1alpha1.FencedResource, token elector.Token) error {
	key := fr.Namespace + "/" + fr.Name
	if fr.Namespace != token.Lease.Namespace || fr.Spec.LeaseName != token.Lease.Name {
		return errorf(ReasonNotHolder, key, fr.Spec.LeaseName, token.Epoch, 0,
			"FencedResource %s is bound to lease %s/%s, not to the token's lease %s", key, fr.Namespace, fr.Spec.LeaseName, token.Lease)
	}
	return nil
}

func stamp(fr *fencingv1alpha1.FencedResource, token elector.Token) {
	fr.Spec.Epoch = token.Epoch
	if fr.Annotations == nil {
		fr.Annotations = map[string]string{}
	}
	fr.Annotations[fencingv1alpha1.WriterAnnotation] = token.Holder
}

func wrap(key types.NamespacedName, token elector.Token, err error) error {
	if _, ok := err.(*Error); ok || apierrors.IsNotFound(err) {
		return err
	}
	return fmt.Errorf("writing FencedResource %s at epoch %d: %w", key, token.Epoch, err)
}
