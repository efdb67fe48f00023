package elector

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// leaseRequests sends an elector's requests on its Lease. The Leases returned are trimmed as the watch's
// are (no managedFields, which the elector never reads: an acquisition resets them; a renewal sends none,
// and the apiserver keeps the stored ones) and share with the version the elector holds what they have
// equal (shareHeld): each elector keeps the last one.
type leaseRequests struct {
	leases leaseClient
	obs    *observer
}

func (q leaseRequests) get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Get(ctx, name, metav1.GetOptions{}) })
}

func (q leaseRequests) create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Create(ctx, l, opts) })
}

func (q leaseRequests) update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Update(ctx, l, opts) })
}

func (q leaseRequests) patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Patch(ctx, name, pt, data, opts) })
}

// listRevision lists at most one Lease of the namespace and returns the list's resourceVersion (the
// storage revision, from which an epoch is seeded).
func (q leaseRequests) listRevision(ctx context.Context) (string, error) {
	list, err := q.leases.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	return list.ResourceVersion, nil
}

// answer sends a request that returns the Lease, trims the answer and shares with the held version what
// is equal.
func (q leaseRequests) answer(send func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	l, err := send()
	if l != nil {
		q.obs.adopt(l)
	}
	return l, err
}
