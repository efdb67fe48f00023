package webhook

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// ObjectsPath is where the object webhook serves. The operator points the webhooks it generates from the
// FencingPolicies (one per namespace, in the ValidatingWebhookConfiguration it keeps) at it.
const ObjectsPath = "/fence-objects"

// ObjectValidator decides every create, update, patch (subresources included) and delete of an object
// that a FencingPolicy declares, with fencing.CheckObjectWrite and fencing.CheckObjectDelete.
type ObjectValidator struct {
	// policies reads FencingPolicies, normally from the manager's cache; reader reads Leases, Namespaces
	// and, when the cache shows no policy for a request the apiserver sent here, the policies again,
	// straight from the apiserver (quorum reads).
	policies, reader ctrl.Reader
	leases           *LeaseCache
	recorder         events.EventRecorder
	clock            clock.PassiveClock
}

// NewObjectValidator returns an ObjectValidator; reader must not be a cache.
func NewObjectValidator(policies, reader ctrl.Reader, opts ...Option) *ObjectValidator {
	// The options are the FencedResource Validator's: the clock and the event recorder apply here.
	v := &Validator{clock: clock.RealClock{}}
	for _, o := range opts {
		o(v)
	}
	return &ObjectValidator{policies: policies, reader: reader, leases: v.leases, recorder: v.recorder, clock: v.clock}
}

// SetupObjectsWithManager registers the object webhook on mgr's webhook server at ObjectsPath, recording
// refusals as Events with the manager's recorder.
func SetupObjectsWithManager(mgr manager.Manager, opts ...Option) {
	opts = append([]Option{WithEventRecorder(mgr.GetEventRecorder(eventSource))}, opts...)
	mgr.GetWebhookServer().Register(ObjectsPath, &webhook.Admission{Handler: NewObjectValidator(mgr.GetClient(), mgr.GetAPIReader(), opts...)})
}

// Handle decides one admission request.
func (v *ObjectValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	w, err := decodeWrite(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	policy, err := v.policyFor(ctx, req, w)
	if err != nil {
		return statusResponse(err)
	}
	if policy == nil {
		return admission.Allowed("")
	}
	w.Policy, w.Lease = policy.Namespace+"/"+policy.Name, policy.Spec.LeaseName
	who := requester(req)
	if who.FieldManager, err = fieldManager(req); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("%s %s: %w", w.Kind, w.Key, err))
	}
	if v.admitOnCache(req, policy, w, who) {
		return admission.Allowed("")
	}
	leaseReads.WithLabelValues(webhookObjects, sourceAPIServer).Inc()
	lease, err := v.lease(ctx, req.Namespace, policy.Spec.LeaseName)
	if err != nil {
		return statusResponse(err)
	}
	var ferr *fencing.Error
	if req.Operation == admissionv1.Delete {
		var ns *corev1.Namespace
		if who.Username == fencing.NamespaceControllerUser {
			if ns, err = v.namespace(ctx, req.Namespace); err != nil {
				return statusResponse(err)
			}
		}
		ferr = fencing.CheckObjectDelete(w, lease, ns, who, v.clock.Now())
	} else {
		ferr = fencing.CheckObjectWrite(w, lease, who, v.clock.Now())
	}
	if ferr != nil {
		report(ctx, v.recorder, req, refusal{webhook: webhookObjects, regarding: regarding(req, w), object: klog.KRef(req.Namespace, req.Name),
			policy: w.Policy, lease: w.Lease, err: ferr})
		return statusResponse(ferr.StatusError())
	}
	return admission.Allowed("")
}

// admitOnCache reports whether w, an update of the object itself at the epoch the object already records,
// is admitted on the watch-fed copy of a Lease that declares fence-on-acquire for FencingPolicy objects
// (LeaseCache.Current). A create, a delete, a subresource, a raise, and every write the copy would refuse
// are decided on a quorum read instead.
//
// So is a write to an object that policy did not cover before it (its labels enter the selector): a
// fence-on-acquire raises only the objects the selector matched when it listed them, so an object outside
// it keeps the epoch record anyone could write there, and a stale holder labelling it in at that epoch
// would be admitted on a copy that lags an acquisition (TestLeaseCacheAttacks).
func (v *ObjectValidator) admitOnCache(req admission.Request, policy *fencingv1alpha1.FencingPolicy, w fencing.ObjectWrite, who fencing.Requester) bool {
	if req.Operation != admissionv1.Update || req.SubResource != "" || w.Old == nil || w.New == nil {
		return false
	}
	old := w.Old.GetLabels()
	if !slices.ContainsFunc(policy.Spec.Resources, func(e fencingv1alpha1.FencedObjects) bool {
		return fencing.Governs(e, req.Resource.Group, req.Resource.Resource, old, old)
	}) {
		return false
	}
	stored, err := elector.ParseEpoch(w.Old.GetAnnotations()[fencingv1alpha1.ObjectEpochAnnotation])
	if err != nil {
		return false
	}
	l := v.leases.Current(req.Namespace, w.Lease, who.FieldManager, stored, declaresObjects)
	if l == nil || fencing.CheckObjectWrite(w, l, who, v.clock.Now()) != nil {
		return false
	}
	leaseReads.WithLabelValues(webhookObjects, sourceCache).Inc()
	return true
}

// regarding is the reference an Event about the refused write req is recorded on: the written object. It
// is nil, and no Event is recorded, for a create with generateName (the object has no name) and for a
// subresource other than status (the request names the subresource's kind, Scale or Eviction, not the
// object's).
//
// It returns a runtime.Object so that "none" is a nil interface, which report tests for, never a nil
// *ObjectReference inside one.
func regarding(req admission.Request, w fencing.ObjectWrite) runtime.Object {
	if req.Name == "" || (req.SubResource != "" && req.SubResource != "status") {
		return nil
	}
	ref := &corev1.ObjectReference{Kind: req.Kind.Kind, Namespace: req.Namespace, Name: req.Name,
		APIVersion: schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String()}
	switch {
	case w.Old != nil:
		ref.UID = w.Old.GetUID()
	case w.New != nil:
		ref.UID = w.New.GetUID()
	}
	return ref
}

func decodeWrite(req admission.Request) (fencing.ObjectWrite, error) {
	w := fencing.ObjectWrite{Kind: req.Kind.Kind, Key: req.Namespace + "/" + req.Name, Subresource: req.SubResource}
	decode := func(raw []byte) (*unstructured.Unstructured, error) {
		if len(raw) == 0 {
			return nil, nil
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("decoding %s %s: %w", w.Kind, w.Key, err)
		}
		return u, nil
	}
	var err error
	if w.Old, err = decode(req.OldObject.Raw); err != nil {
		return w, err
	}
	if w.New, err = decode(req.Object.Raw); err != nil {
		return w, err
	}
	if req.Name == "" && w.New != nil { // a create with generateName
		w.Key = req.Namespace + "/" + w.New.GetGenerateName() + "*"
	}
	return w, nil
}

// policyFor finds the FencingPolicy that declares the object of req, nil if none does. The cache is read
// first; if it shows none although the apiserver sent the request (the operator configured the webhook
// for this namespace and resource from a policy the cache has not seen yet, or not any more), the policies
// are listed again from the apiserver. Two policies bound to different Leases that both cover the object
// (only possible if they were admitted concurrently) refuse the write: fail closed.
func (v *ObjectValidator) policyFor(ctx context.Context, req admission.Request, w fencing.ObjectWrite) (*fencingv1alpha1.FencingPolicy, error) {
	matching, err := matchingPolicies(ctx, v.policies, req, w)
	if err == nil && len(matching) == 0 {
		matching, err = matchingPolicies(ctx, v.reader, req, w)
	}
	if err != nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("listing the FencingPolicies of namespace %s to fence %s %s: %v",
			req.Namespace, w.Kind, w.Key, err))
	}
	if len(matching) == 0 {
		return nil, nil
	}
	for _, p := range matching[1:] {
		if p.Spec.LeaseName != matching[0].Spec.LeaseName {
			return nil, apierrors.NewForbidden(schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}, req.Name, fmt.Errorf(
				"%s %s is declared by FencingPolicy %s (lease %s) and FencingPolicy %s (lease %s): an object can be fenced by one Lease only; delete one of them",
				w.Kind, w.Key, matching[0].Name, matching[0].Spec.LeaseName, p.Name, p.Spec.LeaseName))
		}
	}
	return &matching[0], nil
}

func matchingPolicies(ctx context.Context, r ctrl.Reader, req admission.Request, w fencing.ObjectWrite) ([]fencingv1alpha1.FencingPolicy, error) {
	var old, new map[string]string
	if w.Old != nil {
		old = w.Old.GetLabels()
	}
	if w.New != nil {
		new = w.New.GetLabels()
	}
	return PoliciesFor(ctx, r, req.Namespace, schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}, req.SubResource, old, new)
}

// PoliciesFor lists the FencingPolicies of namespace that declare a write of an object of resource gr
// (through subresource, "" for the object itself) whose labels are old before the write (nil on create)
// and new after it (nil on delete), sorted by name. It is the object webhook's matching, for the tools that
// explain its decisions (kubectl fencekit explain).
func PoliciesFor(ctx context.Context, r ctrl.Reader, namespace string, gr schema.GroupResource, subresource string, old, new map[string]string) ([]fencingv1alpha1.FencingPolicy, error) {
	var list fencingv1alpha1.FencingPolicyList
	if err := r.List(ctx, &list, ctrl.InNamespace(namespace)); err != nil {
		return nil, err
	}
	// A Scale, an Eviction or a Binding carries no labels of the object: every policy naming the resource
	// covers it, whatever its selector (fail closed).
	foreign := subresource != "" && subresource != "status"
	var out []fencingv1alpha1.FencingPolicy
	for _, p := range list.Items {
		if slices.ContainsFunc(p.Spec.Resources, func(e fencingv1alpha1.FencedObjects) bool {
			if foreign {
				return e.Group == gr.Group && e.Resource == gr.Resource
			}
			return fencing.Governs(e, gr.Group, gr.Resource, old, new)
		}) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b fencingv1alpha1.FencingPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (v *ObjectValidator) lease(ctx context.Context, namespace, name string) (*coordinationv1.Lease, error) {
	var lease coordinationv1.Lease
	err := v.reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &lease)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading lease %s/%s to fence a write: %v", namespace, name, err))
	}
	return &lease, nil
}

func (v *ObjectValidator) namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	var ns corev1.Namespace
	err := v.reader.Get(ctx, types.NamespacedName{Name: name}, &ns)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("reading namespace %s to decide a deletion: %v", name, err))
	}
	return &ns, nil
}

func statusResponse(err error) admission.Response {
	var status *apierrors.StatusError
	if s, ok := err.(*apierrors.StatusError); ok {
		status = s
	} else {
		status = apierrors.NewInternalError(err)
	}
	resp := admission.Denied(status.ErrStatus.Message)
	resp.Result = &status.ErrStatus
	return resp
}
