package webhook

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// LeaseCache is the webhooks' watch-fed copy of the fenced Leases (label fencing.fencekit.io/fenced=true).
// The admission rule may let it *admit* a write, and only one that fence-on-acquire makes safe to decide
// from a copy that lags (internal/operator/admission, copyEligible and copyMayAdmit). Every other decision, and
// every refusal, is made on a quorum read of the Lease.
// The reason a lagging copy is safe there is written once, at copyEligible; docs/design/lease-reads.md and
// docs/design/residuals.md say what the copy does not cover.
type LeaseCache struct {
	informer cache.SharedIndexInformer
	lister   coordinationlisters.LeaseLister
	// renewals times each renewal from when the watch delivered it, for every webhook that shares this
	// copy (core.Lease.ObservedRenewal): a webhook that reads a Lease rarely would otherwise date a
	// renewal from its own next read.
	renewals *renewals
}

// NewLeaseCache returns a LeaseCache that lists and watches the fenced Leases of every namespace with cs;
// add it to the manager (it runs on every replica, as the webhooks do).
func NewLeaseCache(cs kubernetes.Interface) *LeaseCache {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = protocol.FencedLabel + "=true"
	}))
	leases := f.Coordination().V1().Leases()
	c := &LeaseCache{informer: leases.Informer(), lister: leases.Lister(), renewals: &renewals{}}
	observe := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok {
			c.renewals.observe(l, time.Now())
		}
	}
	// Registering a handler on an informer that has not started cannot fail.
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: observe, UpdateFunc: func(_, obj any) { observe(obj) }})
	return c
}

var _ manager.LeaderElectionRunnable = (*LeaseCache)(nil)

// Start runs the informer until ctx ends.
func (c *LeaseCache) Start(ctx context.Context) error {
	c.informer.Run(ctx.Done())
	return nil
}

// NeedLeaderElection is false: every replica serves the webhooks.
func (c *LeaseCache) NeedLeaderElection() bool { return false }

// Lease returns the copy of Lease namespace/name as it stands (nil if the copy has none); do not modify it.
func (c *LeaseCache) Lease(namespace, name string) *coordinationv1.Lease {
	l, err := c.lister.Leases(namespace).Get(name)
	if err != nil {
		return nil
	}
	return l
}

// Synced reports whether the copy has listed the Leases once (false for a nil LeaseCache: no copy).
func (c *LeaseCache) Synced() bool { return c != nil && c.informer.HasSynced() }
