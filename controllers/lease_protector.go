package controllers

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// LeaseFinalizer keeps a Lease that FencedResources or FencingPolicies are bound to from being deleted: the
// Lease carries the epoch they compare against, a recreated Lease must not hand out epochs they have already
// admitted, and while it is gone the holder's writes are refused ("lease not found").
const LeaseFinalizer = "fencing.fencekit.io/protect"

// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;patch

// LeaseProtector adds LeaseFinalizer to Leases that FencedResources or FencingPolicies are bound to and
// that are labelled protocol.FencedLabel=true, and removes it from any Lease that is not both (none bound,
// or the label gone).
//
// Only a labelled Lease is worth protecting: the webhook trusts no epoch of an unlabelled Lease (a write
// against it is refused whatever it presents) and the elector does not continue its annotation (it seeds a
// new epoch from the resourceVersion), so deleting and recreating it loses nothing a FencedResource relies
// on. And only a labelled Lease may be protected: the policy <release>-operator-leases refuses the
// operator's identity adding the finalizer to any other, so that a stolen operator token cannot pin a
// node's heartbeat or another application's election Lease against deletion. Removing it is allowed
// everywhere, which releases Leases protected before the label was required.
type LeaseProtector struct {
	client client.Client
}

var _ reconcile.Reconciler = (*LeaseProtector)(nil)

// NewLeaseProtector returns a LeaseProtector that reads from and writes with c.
func NewLeaseProtector(c client.Client) *LeaseProtector { return &LeaseProtector{client: c} }

// SetupWithManager registers the protector; the spec.leaseName index must be registered (IndexLeaseName).
func (p *LeaseProtector) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&coordinationv1.Lease{}, builder.WithPredicates(predicate.Or(leaseChanges, fencedLabelChanges))).
		Watches(&fencingv1alpha1.FencedResource{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			fr := o.(*fencingv1alpha1.FencedResource)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: fr.Namespace, Name: fr.Spec.LeaseName}}}
		})).
		Watches(&fencingv1alpha1.FencingPolicy{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			fp := o.(*fencingv1alpha1.FencingPolicy)
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: fp.Namespace, Name: fp.Spec.LeaseName}}}
		})).
		Named("leaseprotector").
		Complete(p)
}

// Reconcile adds or removes the finalizer on one Lease.
func (p *LeaseProtector) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var lease coordinationv1.Lease
	if err := p.client.Get(ctx, req.NamespacedName, &lease); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// Whether any FencedResource is bound matters, not how many: one, uncopied, answers it.
	var bound fencingv1alpha1.FencedResourceList
	if err := p.client.List(ctx, &bound, client.InNamespace(lease.Namespace), client.MatchingFields{LeaseNameField: lease.Name},
		client.Limit(1), client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing FencedResources bound to lease %s: %w", req.NamespacedName, err)
	}
	var policies fencingv1alpha1.FencingPolicyList
	if err := p.client.List(ctx, &policies, client.InNamespace(lease.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the FencingPolicies of namespace %s: %w", lease.Namespace, err)
	}
	boundPolicies := 0
	for _, fp := range policies.Items {
		if fp.Spec.LeaseName == lease.Name && fp.DeletionTimestamp.IsZero() {
			boundPolicies++
		}
	}
	want := (len(bound.Items) > 0 || boundPolicies > 0) && fencedLease(&lease)
	if controllerutil.ContainsFinalizer(&lease, LeaseFinalizer) == want {
		return reconcile.Result{}, nil
	}
	if want && !lease.DeletionTimestamp.IsZero() {
		// A finalizer cannot be added to an object being deleted; the resources bound to it were
		// created after its deletion began and will see it gone.
		return reconcile.Result{}, nil
	}
	// The patch carries the resourceVersion: the finalizer list is replaced whole, so a concurrent change
	// to it must make this patch fail and be retried rather than be overwritten.
	patch := client.MergeFromWithOptions(lease.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if want {
		controllerutil.AddFinalizer(&lease, LeaseFinalizer)
	} else {
		controllerutil.RemoveFinalizer(&lease, LeaseFinalizer)
	}
	if err := p.client.Patch(ctx, &lease, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating the finalizer of lease %s: %w", req.NamespacedName, err)
	}
	ctrl.LoggerFrom(ctx).Info("updated lease protection", "lease", req.NamespacedName, "protected", want,
		"boundFencedResources", len(bound.Items) > 0, "boundFencingPolicies", boundPolicies, "fenced", fencedLease(&lease))
	return reconcile.Result{}, nil
}

// fencedLease reports whether lease carries the label that puts it under fencekit's Lease policy, the only
// Leases the protector protects.
func fencedLease(lease *coordinationv1.Lease) bool {
	return lease.Labels[protocol.FencedLabel] == "true"
}

// fencedLabelChanges passes a Lease update that adds or removes the fenced label, which leaseChanges does not
// look at: the protector's decision depends on it.
var fencedLabelChanges = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*coordinationv1.Lease)
		lease, ok2 := e.ObjectNew.(*coordinationv1.Lease)
		return !ok1 || !ok2 || fencedLease(old) != fencedLease(lease)
	},
}
