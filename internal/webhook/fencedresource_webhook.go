package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// The webhook reads the bound Lease and, for the namespace controller's deletes, the Namespace.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:webhook:path=/validate-fencing-fencekit-io-v1alpha1-fencedresource,mutating=false,failurePolicy=fail,sideEffects=None,groups=fencing.fencekit.io,resources=fencedresources,verbs=create;update;delete,versions=v1alpha1,name=vfencedresource-v1alpha1.fencing.fencekit.io,admissionReviewVersions=v1,timeoutSeconds=5

// eventSource is the reporting controller of the Events the webhooks record.
const eventSource = "fencekit-webhook"

// Validator admits fenced writes of FencedResources.
type Validator struct {
	// reader reads Leases straight from the apiserver: a quorum read, so that a Lease acquired at a higher
	// epoch a moment ago is always seen. A cache could lag behind it and admit a stale write.
	reader client.Reader
	// leases, if set, may admit a write at the current epoch without the quorum read (LeaseCache.Current).
	leases   *LeaseCache
	recorder events.EventRecorder
	clock    clock.PassiveClock
}

var _ admission.Validator[*fencingv1alpha1.FencedResource] = (*Validator)(nil)

// Option configures a Validator.
type Option func(*Validator)

// WithClock sets the clock used to judge Lease expiry (default: the real clock).
func WithClock(c clock.PassiveClock) Option { return func(v *Validator) { v.clock = c } }

// WithEventRecorder records a Warning Event on the written object for every refused write (not for dry
// runs): on the FencedResource, or on the object a FencingPolicy declares.
func WithEventRecorder(r events.EventRecorder) Option { return func(v *Validator) { v.recorder = r } }

// WithLeaseCache lets the webhooks admit a write at the current epoch to an object of a kind the Lease
// declares fenced on acquire from c, without a quorum read of the Lease (see LeaseCache).
func WithLeaseCache(c *LeaseCache) Option { return func(v *Validator) { v.leases = c } }

// NewValidator returns a Validator that reads Leases with reader, which must not be a cache.
func NewValidator(reader client.Reader, opts ...Option) *Validator {
	v := &Validator{reader: reader, clock: clock.RealClock{}}
	for _, o := range opts {
		o(v)
	}
	return v
}

// SetupWithManager registers the webhook on mgr's webhook server, reading Leases with the manager's
// uncached API reader.
func SetupWithManager(mgr ctrl.Manager, opts ...Option) error {
	opts = append([]Option{WithEventRecorder(mgr.GetEventRecorder(eventSource))}, opts...)
	return ctrl.NewWebhookManagedBy(mgr, &fencingv1alpha1.FencedResource{}).
		WithValidator(NewValidator(mgr.GetAPIReader(), opts...)).
		Complete()
}

// ValidateCreate admits a declaration freely and a create carrying data or an epoch only if it is fenced.
func (v *Validator) ValidateCreate(ctx context.Context, fr *fencingv1alpha1.FencedResource) (admission.Warnings, error) {
	return nil, v.validate(ctx, nil, fr)
}

// ValidateUpdate (updates and patches) admits an update that changes no fenced field and presents no token
// freely, and any other only if it is fenced.
func (v *Validator) ValidateUpdate(ctx context.Context, old, fr *fencingv1alpha1.FencedResource) (admission.Warnings, error) {
	return nil, v.validate(ctx, old, fr)
}

// ValidateDelete admits a delete by the Lease's holder (with the deletion marker at the current epoch), an
// admin, the garbage collector, the namespace controller in a terminating namespace, or anyone once the
// Lease has no live holder.
func (v *Validator) ValidateDelete(ctx context.Context, fr *fencingv1alpha1.FencedResource) (admission.Warnings, error) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return nil, err
	}
	leaseReads.WithLabelValues(webhookFencedResources, sourceAPIServer).Inc()
	lease, err := v.lease(ctx, fr)
	if err != nil {
		return nil, err
	}
	who := requester(req)
	var ns *corev1.Namespace
	if who.Username == fencing.NamespaceControllerUser {
		// Only the namespace controller's delete depends on its namespace: read it, as the Lease, without a cache.
		if ns, err = v.namespace(ctx, fr); err != nil {
			return nil, err
		}
	}
	if ferr := fencing.CheckDelete(fr, lease, ns, who, v.clock.Now()); ferr != nil {
		v.refused(ctx, req, fr, ferr)
		return nil, ferr.StatusError()
	}
	return nil, nil
}

func (v *Validator) validate(ctx context.Context, old, fr *fencingv1alpha1.FencedResource) error {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return err
	}
	who := requester(req)
	if who.FieldManager, err = fieldManager(req); err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("FencedResource %s/%s: %v", fr.Namespace, fr.Name, err))
	}
	if !mayTouchFencedFields(old, fr) && !strings.HasPrefix(who.FieldManager, elector.FieldManagerPrefix) {
		return nil
	}
	// An update at the resource's own epoch may be admitted on the watch-fed copy of a Lease that declares
	// fence-on-acquire for FencedResources; anything else, and every refusal, is decided on a quorum read.
	if old != nil {
		if l := v.leases.Current(fr.Namespace, fr.Spec.LeaseName, who.FieldManager, old.Spec.Epoch, declaresFencedResources); l != nil &&
			fencing.CheckWrite(old, fr, l, who, v.clock.Now()) == nil {
			leaseReads.WithLabelValues(webhookFencedResources, sourceCache).Inc()
			return nil
		}
	}
	leaseReads.WithLabelValues(webhookFencedResources, sourceAPIServer).Inc()
	lease, err := v.lease(ctx, fr)
	if err != nil {
		return err
	}
	if ferr := fencing.CheckWrite(old, fr, lease, who, v.clock.Now()); ferr != nil {
		v.refused(ctx, req, fr, ferr)
		return ferr.StatusError()
	}
	return nil
}

// lease reads the bound Lease, nil if it does not exist. Any other error fails the admission: fencekit
// cannot prove the write is fenced, so it is refused (fail closed).
func (v *Validator) lease(ctx context.Context, fr *fencingv1alpha1.FencedResource) (*coordinationv1.Lease, error) {
	var lease coordinationv1.Lease
	err := v.reader.Get(ctx, types.NamespacedName{Namespace: fr.Namespace, Name: fr.Spec.LeaseName}, &lease)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
			"reading lease %s/%s to fence FencedResource %s/%s: %v", fr.Namespace, fr.Spec.LeaseName, fr.Namespace, fr.Name, err))
	}
	return &lease, nil
}

// namespace reads fr's Namespace, nil if it does not exist; any other error fails the admission.
func (v *Validator) namespace(ctx context.Context, fr *fencingv1alpha1.FencedResource) (*corev1.Namespace, error) {
	var ns corev1.Namespace
	err := v.reader.Get(ctx, types.NamespacedName{Name: fr.Namespace}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
			"reading namespace %s to decide the deletion of FencedResource %s/%s: %v", fr.Namespace, fr.Namespace, fr.Name, err))
	}
	return &ns, nil
}

// fieldManager is the request's field manager, where a fenced write presents its token: the options of a
// CREATE (CreateOptions), an UPDATE (UpdateOptions) or a PATCH (PatchOptions; admission sees it as UPDATE).
func fieldManager(req admission.Request) (string, error) {
	if len(req.Options.Raw) == 0 {
		return "", nil
	}
	var opts struct {
		FieldManager string `json:"fieldManager"`
	}
	if err := json.Unmarshal(req.Options.Raw, &opts); err != nil {
		return "", fmt.Errorf("decoding the request's options: %w", err)
	}
	return opts.FieldManager, nil
}

// refused reports the refusal of req (see report).
func (v *Validator) refused(ctx context.Context, req admission.Request, fr *fencingv1alpha1.FencedResource, ferr *fencing.Error) {
	report(ctx, v.recorder, req, refusal{webhook: webhookFencedResources, regarding: fr, object: klog.KObj(fr), lease: fr.Spec.LeaseName, err: ferr})
}

func requester(req admission.Request) fencing.Requester {
	return fencing.Requester{Username: req.UserInfo.Username, Groups: req.UserInfo.Groups}
}
