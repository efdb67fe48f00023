package fencing_test

import (
	"context"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// updates counts a client's writes (UPDATE and PATCH requests) and how many of them failed on a
// resourceVersion conflict.
type updates struct{ sent, conflicts atomic.Int64 }

// countingClient returns a client for cfg that counts its writes.
func countingClient(b *testing.B, cfg *rest.Config) (client.Client, *updates) {
	b.Helper()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	u := &updates{}
	return interceptor.NewClient(c, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			u.sent.Add(1)
			err := c.Update(ctx, obj, opts...)
			if apierrors.IsConflict(err) {
				u.conflicts.Add(1)
			}
			return err
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			u.sent.Add(1)
			err := c.Patch(ctx, obj, patch, opts...)
			if apierrors.IsConflict(err) {
				u.conflicts.Add(1)
			}
			return err
		},
	}), u
}
