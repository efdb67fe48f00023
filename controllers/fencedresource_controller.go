package controllers

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// +kubebuilder:rbac:groups=fencing.fencekit.io,resources=fencedresources,verbs=get;list;watch
// +kubebuilder:rbac:groups=fencing.fencekit.io,resources=fencedresources/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// FencedResourceReconciler keeps FencedResource status in step with the bound Lease.
type FencedResourceReconciler struct {
	client client.Client
}

var _ reconcile.Reconciler = (*FencedResourceReconciler)(nil)

// NewFencedResourceReconciler returns a reconciler that reads from and writes with c.
func NewFencedResourceReconciler(c client.Client) *FencedResourceReconciler {
	return &FencedResourceReconciler{client: c}
}

// SetupWithManager registers the reconciler; the spec.leaseName index must be registered (IndexLeaseName).
func (r *FencedResourceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fencingv1alpha1.FencedResource{}).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(r.fencedResourcesOf), builder.WithPredicates(leaseChanges)).
		Named("fencedresource").
		Complete(r)
}

// fencedResourcesOf maps a Lease to the FencedResources bound to it.
func (r *FencedResourceReconciler) fencedResourcesOf(ctx context.Context, lease client.Object) []reconcile.Request {
	items, err := boundTo(ctx, r.client, lease.GetNamespace(), lease.GetName())
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing FencedResources bound to a Lease", "lease", client.ObjectKeyFromObject(lease))
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(items))
	for _, fr := range items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&fr)})
	}
	return reqs
}

// Reconcile computes the FencedResource's status from its spec and its Lease and writes it if it changed.
func (r *FencedResourceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var fr fencingv1alpha1.FencedResource
	if err := r.client.Get(ctx, req.NamespacedName, &fr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var lease *coordinationv1.Lease
	var l coordinationv1.Lease
	switch err := r.client.Get(ctx, types.NamespacedName{Namespace: fr.Namespace, Name: fr.Spec.LeaseName}, &l); {
	case err == nil:
		lease = &l
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading lease %s/%s: %w", fr.Namespace, fr.Spec.LeaseName, err)
	}
	status := ComputeStatus(&fr, lease)
	if equality.Semantic.DeepEqual(status, fr.Status) {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFrom(fr.DeepCopy())
	fr.Status = status
	if err := r.client.Status().Patch(ctx, &fr, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating FencedResource status: %w", err)
	}
	return reconcile.Result{}, nil
}

// ComputeStatus is the status of fr given its Lease (nil if missing). Condition transition times are kept
// from fr's current status when a condition does not change.
func ComputeStatus(fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease) fencingv1alpha1.FencedResourceStatus {
	s := fencingv1alpha1.FencedResourceStatus{
		AdmittedEpoch:      fr.Spec.Epoch,
		ObservedGeneration: fr.Generation,
		Conditions:         append([]metav1.Condition(nil), fr.Status.Conditions...),
	}
	if fr.Spec.Epoch > 0 {
		s.Holder = fr.Annotations[fencingv1alpha1.WriterAnnotation]
	}
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: fr.Generation})
	}
	switch {
	case lease == nil:
		set(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseNotFound,
			fmt.Sprintf("lease %s does not exist in namespace %s; every fenced write is refused until an elector creates it", fr.Spec.LeaseName, fr.Namespace))
		set(fencingv1alpha1.ConditionFenced, metav1.ConditionUnknown, fencingv1alpha1.ReasonLeaseNotFound, "no lease to compare epochs with")
	default:
		v := fencing.ViewLease(lease)
		s.LeaseHolder = v.Holder
		if v.EpochErr != "" {
			set(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseInvalid,
				fmt.Sprintf("lease %s cannot fence: %s", fr.Spec.LeaseName, v.EpochErr))
			set(fencingv1alpha1.ConditionFenced, metav1.ConditionUnknown, fencingv1alpha1.ReasonLeaseInvalid, "the lease has no valid epoch")
			break
		}
		s.LeaseEpoch = v.Epoch
		set(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionTrue, fencingv1alpha1.ReasonLeaseFound,
			fmt.Sprintf("lease %s is at epoch %d", fr.Spec.LeaseName, v.Epoch))
		switch {
		case fr.Spec.Epoch == v.Epoch:
			set(fencingv1alpha1.ConditionFenced, metav1.ConditionTrue, fencingv1alpha1.ReasonAtLeaseEpoch,
				fmt.Sprintf("at the lease's epoch %d: writes from earlier epochs are refused", v.Epoch))
		case fr.Spec.Epoch < v.Epoch:
			set(fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, fencingv1alpha1.ReasonBehindLease,
				fmt.Sprintf("at epoch %d, behind the lease's epoch %d: the admission webhook still refuses writes below %d", fr.Spec.Epoch, v.Epoch, v.Epoch))
		default:
			set(fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, fencingv1alpha1.ReasonAheadOfLease,
				fmt.Sprintf("at epoch %d, ahead of the lease's epoch %d: the lease was recreated", fr.Spec.Epoch, v.Epoch))
		}
	}
	found := meta.IsStatusConditionTrue(s.Conditions, fencingv1alpha1.ConditionLeaseFound)
	fenced := meta.IsStatusConditionTrue(s.Conditions, fencingv1alpha1.ConditionFenced)
	switch {
	case found && fenced:
		set(fencingv1alpha1.ConditionReady, metav1.ConditionTrue, fencingv1alpha1.ReasonFenced, "the lease exists and this resource is at its epoch")
	case !found:
		set(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, fencingv1alpha1.ReasonNotFenced, "the lease is missing or has no valid epoch")
	default:
		set(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, fencingv1alpha1.ReasonNotFenced, "this resource's epoch differs from the lease's")
	}
	return s
}
