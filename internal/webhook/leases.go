package webhook

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencekit/fencekit/pkg/elector"
)

// LeaseCache is the webhooks' watch-fed copy of the fenced Leases (label fencing.fencekit.io/fenced=true).
// It may only *admit* a write, and only one that fence-on-acquire makes safe to decide from a copy that
// lags: see Current. Every other decision, and every refusal, is made on a quorum read of the Lease.
//
// Why a lagging copy is safe there: a write that Current lets through presents epoch e, and the object it
// changes still holds epoch e. If the Lease has meanwhile been acquired at e+1 (the copy has not seen it
// yet), that acquisition declared the object's kind (the Lease policy keeps a declaration once made, and
// the copy shows it), so the new holder's PostAcquire raises the object to e+1 before it hands out its
// token. The write and that raise are serialized by the apiserver's compare-and-swap on the object: if the
// raise commits first, the write is retried against the raised object and decided again (the stored epoch
// is then e+1, so not here, and the CRD rule or the per-object rule refuses it); if the write commits first,
// it comes before the raise, hence before the new holder's token exists. So no write presenting e is
// admitted after the holder of e+1 was handed its token, which is what the quorum read guarantees too.
// docs/design.md ("Which Lease read decides a write") says what the copy does not cover.
type LeaseCache struct {
	informer cache.SharedIndexInformer
	lister   coordinationlisters.LeaseLister
}

// NewLeaseCache returns a LeaseCache that lists and watches the fenced Leases of every namespace with cs;
// add it to the manager (it runs on every replica, as the webhooks do).
func NewLeaseCache(cs kubernetes.Interface) *LeaseCache {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = elector.FencedLabel + "=true"
	}))
	leases := f.Coordination().V1().Leases()
	return &LeaseCache{informer: leases.Informer(), lister: leases.Lister()}
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

// Current returns the copy of Lease namespace/name if it may decide a write that presents the token
// fieldManager to an object of the kind declared(f) selects whose stored epoch is stored: the copy is
// synced, the Lease is fenced, its epoch is the presented one, the object still holds that epoch (so the
// write raises nothing), and the Lease declares that every acquisition fences that kind. Otherwise nil:
// read the Lease from the apiserver. The caller must not modify the Lease.
func (c *LeaseCache) Current(namespace, name, fieldManager string, stored int64, declared func(elector.Fences) bool) *coordinationv1.Lease {
	if c == nil || !c.informer.HasSynced() {
		return nil
	}
	presented, ok := elector.EpochFromFieldManager(fieldManager)
	if !ok || presented != stored {
		return nil
	}
	l := c.Lease(namespace, name)
	if l == nil || l.Labels[elector.FencedLabel] != "true" {
		return nil
	}
	if epoch, err := elector.ParseEpoch(l.Annotations[elector.EpochAnnotation]); err != nil || epoch != presented {
		return nil
	}
	f, err := elector.ParseFences(l.Annotations[elector.FencesAnnotation])
	if err != nil || !declared(f) {
		return nil
	}
	return l
}

// Which kind a webhook's writes are: the declarations that cover them.
func declaresFencedResources(f elector.Fences) bool { return f.FencedResources }
func declaresObjects(f elector.Fences) bool         { return f.Objects }

// The sources a webhook's decision read its Lease from.
const (
	sourceCache     = "cache"
	sourceAPIServer = "apiserver"
)

// leaseReads counts the webhooks' decisions that needed the bound Lease, by where they read it: "cache"
// (admitted on the LeaseCache, no request to the apiserver) or "apiserver" (a quorum read). It shows
// whether the fast path is taken, and how often writes fall back to the quorum read.
var leaseReads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencekit_webhook_lease_reads_total",
	Help: "Decisions of a fencekit webhook (webhook: fencedresources or objects) that needed the bound Lease, by source: " +
		"cache (admitted on the watch-fed copy of a Lease that declares fence-on-acquire) or apiserver (a quorum read).",
}, []string{"webhook", "source"})

func init() {
	metrics.Registry.MustRegister(leaseReads)
}
