package webhook

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
)

// The labels of the objects written through a Scale, an Eviction or a Binding (objectLabels); a custom
// resource's scale needs get on that resource granted to the operator too.
// +kubebuilder:rbac:groups="",resources=pods;replicationcontrollers,verbs=get
// +kubebuilder:rbac:groups=apps,resources=deployments;replicasets;statefulsets,verbs=get

// ObjectsPath is where the object webhook serves. The operator points the webhooks it generates from the
// FencingPolicies (one per namespace, in the ValidatingWebhookConfiguration it keeps) at it.
const ObjectsPath = "/fence-objects"

// ObjectValidator decides every create, update, patch (subresources included) and delete of an object
// that a FencingPolicy declares, with the admission rule (internal/operator/admission).
type ObjectValidator struct {
	// policies reads FencingPolicies, normally from the manager's cache; the decider's reader reads
	// Leases, Namespaces and, when the cache shows no policy for a request the apiserver sent here, the
	// policies again, straight from the apiserver (quorum reads).
	policies ctrl.Reader
	// aliases are the resources whose writes stand for a subresource of another (core bindings for
	// pods/binding): a request to one is decided as that route.
	aliases admission.Aliases
	// objects reads the labels of the object a write through a Scale, an Eviction or a Binding is about,
	// straight from the apiserver (those subresources carry none of them).
	objects metadata.Interface
	decider
}

// NewObjectValidator returns an ObjectValidator; reader must not be a cache, and objects reads from the
// apiserver. aliases are the apiserver's alias routes (admission.AliasesFrom), which the operator's webhook
// configuration also matches.
func NewObjectValidator(policies, reader ctrl.Reader, objects metadata.Interface, aliases admission.Aliases, opts ...Option) *ObjectValidator {
	return &ObjectValidator{policies: policies, aliases: aliases, objects: objects, decider: newDecider(webhookObjects, reader, opts)}
}

// SetupObjectsWithManager registers the object webhook on mgr's webhook server at ObjectsPath, recording
// refusals as Events with the manager's recorder.
func SetupObjectsWithManager(mgr manager.Manager, aliases admission.Aliases, opts ...Option) error {
	objects, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("building the client that reads objects' labels for the object webhook: %w", err)
	}
	opts = append([]Option{WithEventRecorder(mgr.GetEventRecorder(eventSource))}, opts...)
	mgr.GetWebhookServer().Register(ObjectsPath, &webhook.Admission{Handler: NewObjectValidator(mgr.GetClient(), mgr.GetAPIReader(), objects, aliases, opts...)})
	return nil
}

// Handle decides one admission request.
func (v *ObjectValidator) Handle(ctx context.Context, req ctrladmission.Request) ctrladmission.Response {
	r, err := decodeRequest(req, admission.Object)
	if err != nil {
		return badRequest(err)
	}
	route := v.aliases.Resolve(schema.GroupResource{Group: req.Resource.Group, Resource: req.Resource.Resource}, req.SubResource)
	r.Subresource = route.Subresource
	policy, err := v.policyFor(ctx, req, route, r)
	if err != nil {
		return statusResponse(err)
	}
	if policy == nil {
		return ctrladmission.Allowed("")
	}
	r.Policy, r.LeaseName = policy.Namespace+"/"+policy.Name, policy.Spec.LeaseName
	verdict, err := v.decide(ctx, r)
	return v.respond(ctx, req, r, verdict, err)
}

// regarding is the reference an Event about the refused write is recorded on: the written object. It
// is nil, and no Event is recorded, for a create with generateName (the object has no name) and for a
// subresource other than status, or an alias of one (the request names the subresource's kind, Scale,
// Eviction or Binding, not the object's).
//
// It returns a runtime.Object so that "none" is a nil interface, which report tests for, never a nil
// *ObjectReference inside one.
func regarding(req ctrladmission.Request, r *admission.Request) runtime.Object {
	foreign := func(sub string) bool { return sub != "" && sub != "status" }
	if strings.HasSuffix(r.Name, "*") || r.Name == "" || foreign(req.SubResource) || foreign(r.Subresource) {
		return nil
	}
	ref := &corev1.ObjectReference{Kind: req.Kind.Kind, Namespace: r.Namespace, Name: r.Name,
		APIVersion: schema.GroupVersion{Group: req.Kind.Group, Version: req.Kind.Version}.String()}
	switch {
	case r.Old != nil:
		ref.UID = r.Old.GetUID()
	case r.New != nil:
		ref.UID = r.New.GetUID()
	}
	return ref
}

func objectRef(r *admission.Request) klog.ObjectRef { return klog.KRef(r.Namespace, r.Name) }

// policyFor finds the FencingPolicy that declares the object of r, nil if none does, and sets r's coverage
// before and after the write (admission.CoverageOf, which kubectl fencekit explain reports too). The cache
// is read first; if it shows none although the apiserver sent the request (the operator configured the
// webhook for this namespace and resource from a policy the cache has not seen yet, or not any more), the
// policies are listed again from the apiserver. Two policies bound to different Leases that both cover the
// object (only possible if they were admitted concurrently) refuse the write: fail closed.
//
// A Scale, an Eviction or a Binding carries no labels of the object it writes: when a policy naming the
// resource has a selector, the object's labels are read from the apiserver (objectLabels) and coverage is
// judged by them. Neither route can change labels, so coverage is the same before and after the write.
func (v *ObjectValidator) policyFor(ctx context.Context, req ctrladmission.Request, route admission.Route, r *admission.Request) (*fencingv1alpha1.FencingPolicy, error) {
	gr := route.Resource
	var old, updated map[string]string
	if r.Old != nil {
		old = r.Old.GetLabels()
	}
	if r.New != nil {
		updated = r.New.GetLabels()
	}
	sub := route.Subresource
	coverage := func(reader ctrl.Reader) (admission.Coverage, error) {
		list, err := policies(ctx, reader, req.Namespace)
		if err != nil {
			return admission.Coverage{}, apierrors.NewServiceUnavailable(fmt.Sprintf("listing the FencingPolicies of namespace %s to fence %s %s/%s: %v",
				req.Namespace, r.Kind, r.Namespace, r.Name, err))
		}
		return admission.CoverageOf(list, gr, sub, r.Name, old, updated, r.Old != nil, r.New != nil), nil
	}
	c, err := coverage(v.policies)
	if err == nil && len(c.Policies) == 0 {
		c, err = coverage(v.reader)
	}
	if err != nil {
		return nil, err
	}
	if !admission.CarriesObject(sub) && selective(c.Policies, gr) {
		labels, known, err := v.objectLabels(ctx, req, gr)
		if err != nil {
			return nil, err
		}
		if known {
			old, updated, sub = labels, labels, ""
			if c, err = coverage(v.policies); err == nil && len(c.Policies) == 0 {
				// The cache may not have the policy that selects these labels yet: ask the apiserver.
				c, err = coverage(v.reader)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	if len(c.Policies) == 0 {
		return nil, nil
	}
	if p := c.Conflict; p != nil {
		first := c.Policies[0]
		return nil, apierrors.NewForbidden(gr, r.Name, fmt.Errorf(
			"%s %s/%s is declared by FencingPolicy %s (lease %s) and FencingPolicy %s (lease %s): an object can be fenced by one Lease only; delete one of them",
			r.Kind, r.Namespace, r.Name, first.Name, first.Spec.LeaseName, p.Name, p.Spec.LeaseName))
	}
	r.CoveredBefore, r.CoveredAfter = c.Before, c.After
	r.CoverageRecorded, r.CoverageEpoch = c.Recorded, c.Epoch
	return &c.Policies[0], nil
}

// selective reports whether a policy of policies names gr with a selector: whether coverage of a write
// through a subresource that carries no labels depends on the object's.
func selective(policies []fencingv1alpha1.FencingPolicy, gr schema.GroupResource) bool {
	for _, p := range policies {
		for _, entry := range p.Spec.Resources {
			if entry.Group == gr.Group && entry.Resource == gr.Resource && entry.Selector != nil {
				return true
			}
		}
	}
	return false
}

// objectLabels reads the labels of the object req writes through a subresource, straight from the
// apiserver (a quorum read, after the apiserver read the object the write replaces). For a Scale, whose
// write is a compare-and-swap on the object, the labels read are those of the object it replaces or of a
// later one, and then the apiserver's swap fails and the write is decided again. An object that does not
// exist yet has no labels known: an Eviction or a Binding of a Pod about to be created would be carried out
// on the Pod the holder creates next, so every policy naming the resource covers it. Without RBAC to read
// the object (a custom resource's scale the operator was not granted get on) the labels are not known
// either (fail closed). Any other error fails the admission.
func (v *ObjectValidator) objectLabels(ctx context.Context, req ctrladmission.Request, gr schema.GroupResource) (labels map[string]string, known bool, err error) {
	m, err := v.objects.Resource(gr.WithVersion(req.Resource.Version)).Namespace(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case apierrors.IsForbidden(err):
		klog.FromContext(ctx).V(2).Info("cannot read the labels of the object written through a subresource; every policy naming its resource covers it",
			"resource", gr.String(), "object", klog.KRef(req.Namespace, req.Name), "subresource", req.SubResource, "err", err.Error())
		return nil, false, nil
	case err != nil:
		return nil, false, apierrors.NewServiceUnavailable(fmt.Sprintf("reading the labels of %s %s/%s to decide which FencingPolicy covers a write through %s: %v",
			gr, req.Namespace, req.Name, req.SubResource, err))
	}
	if m.Labels == nil {
		return map[string]string{}, true, nil
	}
	return m.Labels, true, nil
}

// policies lists the FencingPolicies of namespace.
func policies(ctx context.Context, r ctrl.Reader, namespace string) ([]fencingv1alpha1.FencingPolicy, error) {
	var list fencingv1alpha1.FencingPolicyList
	if err := r.List(ctx, &list, ctrl.InNamespace(namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}
