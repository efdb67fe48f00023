package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
)

// +kubebuilder:rbac:groups=fencing.fencekit.io,resources=fencedresources,verbs=get;list;watch
// +kubebuilder:rbac:groups=fencing.fencekit.io,resources=fencedresources/status,verbs=get;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch

// DefaultStatusInterval is how long the reconciler waits, after writing a FencedResource's status, before it
// writes it again when only observedGeneration would change (see FencedResourceReconciler).
const DefaultStatusInterval = time.Second

// FencedResourceReconciler keeps FencedResource status in step with the bound Lease.
//
// A status write changes the resource's resourceVersion, so a status patch after every holder write makes
// the apiserver's first attempt at the holder's next write (on its watch cache's copy) fail its
// compare-and-swap and run admission, the webhook included, a second time. So the reconciler coalesces:
// when the new status differs from the stored one only in observedGeneration (a write of data at the same
// epoch by the same holder), it writes it at most once per status interval per resource, and otherwise at
// once. What it guarantees:
//
//   - Every other change (the Lease's epoch or holder, admittedEpoch, holder, a condition's status, reason or
//     message) is written at once, whatever the interval.
//   - status.observedGeneration and the conditions' observedGeneration are never ahead of what the status
//     was computed from: a resource whose observedGeneration is below its generation reads as "in
//     progress" to kstatus and Argo CD, never as current.
//   - After a write of generation g, a status with observedGeneration >= g is written no later than one
//     interval after the resource's previous status write (plus the reconcile's own latency): under
//     sustained writes observedGeneration trails by at most one interval, and once writes stop it catches
//     up within one interval, without any further event.
type FencedResourceReconciler struct {
	client   client.Client
	clock    clock.Clock
	interval time.Duration

	mu        sync.Mutex
	lastWrite map[types.NamespacedName]time.Time // last status write per resource, by clock
}

var _ reconcile.Reconciler = (*FencedResourceReconciler)(nil)

// Option configures a FencedResourceReconciler.
type Option func(*FencedResourceReconciler)

// WithClock sets the clock that spaces status writes (default: the real clock).
func WithClock(c clock.Clock) Option { return func(r *FencedResourceReconciler) { r.clock = c } }

// WithStatusInterval sets the least time between two status writes of one resource that change only
// observedGeneration (default DefaultStatusInterval; 0 writes every change at once).
func WithStatusInterval(d time.Duration) Option {
	return func(r *FencedResourceReconciler) { r.interval = max(d, 0) }
}

// NewFencedResourceReconciler returns a reconciler that reads from and writes with c.
func NewFencedResourceReconciler(c client.Client, opts ...Option) *FencedResourceReconciler {
	r := &FencedResourceReconciler{client: c, clock: clock.RealClock{}, interval: DefaultStatusInterval,
		lastWrite: map[types.NamespacedName]time.Time{}}
	for _, o := range opts {
		o(r)
	}
	return r
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
		ctrl.LoggerFrom(ctx).Error(err, "listing FencedResources bound to a Lease", "lease", klog.KObj(lease))
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
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
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
	if onlyGenerationDiffers(fr.Status, status) {
		if wait := r.untilNextWrite(req.NamespacedName); wait > 0 {
			// Coalesced: a later event or this requeue writes the status of the generation then current.
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	patch := client.MergeFrom(fr.DeepCopy())
	fr.Status = status
	if err := r.client.Status().Patch(ctx, &fr, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating FencedResource status: %w", err)
	}
	r.wrote(req.NamespacedName)
	return reconcile.Result{}, nil
}

// untilNextWrite is how long a status write of key that changes only observedGeneration must still wait;
// 0 if it may be written now.
func (r *FencedResourceReconciler) untilNextWrite(key types.NamespacedName) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.lastWrite[key]
	if !ok {
		return 0
	}
	return max(r.interval-r.clock.Since(last), 0)
}

func (r *FencedResourceReconciler) wrote(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastWrite[key] = r.clock.Now()
}

func (r *FencedResourceReconciler) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.lastWrite, key)
}

// onlyGenerationDiffers reports whether the statuses a and b are equal but for observedGeneration, the
// status's and the conditions'.
func onlyGenerationDiffers(a, b fencingv1alpha1.FencedResourceStatus) bool {
	strip := func(s fencingv1alpha1.FencedResourceStatus) fencingv1alpha1.FencedResourceStatus {
		s = *s.DeepCopy()
		s.ObservedGeneration = 0
		for i := range s.Conditions {
			s.Conditions[i].ObservedGeneration = 0
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

// ComputeStatus is the status of fr given its Lease (nil if missing). Condition transition times are kept
// from fr's current status when a condition does not change. The conditions are the operator's three
// alone: a condition of another type, which anyone with RBAC on the status may write, is dropped, so that
// none can fill the CRD's eight or the bounds on writes without the token and keep the operator from
// reporting.
func ComputeStatus(fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease) fencingv1alpha1.FencedResourceStatus {
	atEpoch := fr.Spec.FencedEpoch() // spec.epoch, or spec.raisedEpoch of a raised declaration
	s := fencingv1alpha1.FencedResourceStatus{
		AdmittedEpoch:      atEpoch,
		ObservedGeneration: fr.Generation,
	}
	for _, c := range fr.Status.Conditions {
		switch c.Type {
		case fencingv1alpha1.ConditionReady, fencingv1alpha1.ConditionLeaseFound, fencingv1alpha1.ConditionFenced:
			s.Conditions = append(s.Conditions, c)
		}
	}
	if fr.Spec.Epoch > 0 {
		s.Holder = fr.Annotations[fencingv1alpha1.WriterAnnotation]
	}
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: fr.Generation})
	}
	switch lease {
	case nil:
		set(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseNotFound,
			fmt.Sprintf("lease %s does not exist in namespace %s; every fenced write is refused until an elector creates it", fr.Spec.LeaseName, fr.Namespace))
		set(fencingv1alpha1.ConditionFenced, metav1.ConditionUnknown, fencingv1alpha1.ReasonLeaseNotFound, "no lease to compare epochs with")
	default:
		v := admission.ParseLease(lease, admission.Quorum)
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
		case atEpoch == v.Epoch:
			set(fencingv1alpha1.ConditionFenced, metav1.ConditionTrue, fencingv1alpha1.ReasonAtLeaseEpoch,
				fmt.Sprintf("at the lease's epoch %d: writes from earlier epochs are refused", v.Epoch))
		case atEpoch < v.Epoch:
			set(fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, fencingv1alpha1.ReasonBehindLease,
				fmt.Sprintf("at epoch %d, behind the lease's epoch %d: the admission webhook still refuses writes below %d", atEpoch, v.Epoch, v.Epoch))
		default:
			set(fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, fencingv1alpha1.ReasonAheadOfLease,
				fmt.Sprintf("at epoch %d, ahead of the lease's epoch %d: the lease was recreated", atEpoch, v.Epoch))
		}
	}
	// Ready=False names its cause: the reason and message of the condition that is not True (LeaseNotFound,
	// LeaseInvalid, BehindLease, AheadOfLease), so that `kubectl get fr -o wide` shows it.
	found := meta.FindStatusCondition(s.Conditions, fencingv1alpha1.ConditionLeaseFound)
	fenced := meta.FindStatusCondition(s.Conditions, fencingv1alpha1.ConditionFenced)
	switch {
	case found.Status != metav1.ConditionTrue:
		set(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, found.Reason, found.Message)
	case fenced.Status != metav1.ConditionTrue:
		set(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, fenced.Reason, fenced.Message)
	default:
		set(fencingv1alpha1.ConditionReady, metav1.ConditionTrue, fencingv1alpha1.ReasonFenced, "the lease exists and this resource is at its epoch")
	}
	return s
}
