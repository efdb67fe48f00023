package webhook

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencekit/fencekit/internal/operator/admission"
)

// The webhook reads the bound Lease and the Namespace (for the namespace controller's deletes, and from a
// cache for the writes that present a token).
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:webhook:path=/validate-fencing-fencekit-io-v1alpha1-fencedresource,mutating=false,failurePolicy=fail,sideEffects=None,groups=fencing.fencekit.io,resources=fencedresources;fencedresources/*,verbs=create;update;delete,versions=v1alpha1,name=vfencedresource-v1alpha1.fencing.fencekit.io,admissionReviewVersions=v1,timeoutSeconds=5

// FencedResourcesPath is where the FencedResource webhook serves (the path kubebuilder derives for the
// type, which config/webhook names).
const FencedResourcesPath = "/validate-fencing-fencekit-io-v1alpha1-fencedresource"

// eventSource is the reporting controller of the Events the webhooks record.
const eventSource = "fencekit-webhook"

// FencedResourceValidator decides every create, update, patch and delete of a FencedResource with the admission rule
// (internal/operator/admission).
type FencedResourceValidator struct{ decider }

// NewFencedResourceValidator returns a FencedResourceValidator that reads Leases with reader, which must not be a cache.
func NewFencedResourceValidator(reader client.Reader, opts ...Option) *FencedResourceValidator {
	return &FencedResourceValidator{decider: newDecider(webhookFencedResources, reader, opts)}
}

// SetupWithManager registers the webhook on mgr's webhook server, reading Leases with the manager's
// uncached API reader.
func SetupWithManager(mgr manager.Manager, opts ...Option) error {
	opts = append([]Option{WithEventRecorder(mgr.GetEventRecorder(eventSource))}, opts...)
	mgr.GetWebhookServer().Register(FencedResourcesPath, &webhook.Admission{Handler: NewFencedResourceValidator(mgr.GetAPIReader(), opts...)})
	return nil
}

// Handle decides one admission request.
func (v *FencedResourceValidator) Handle(ctx context.Context, req ctrladmission.Request) ctrladmission.Response {
	r, err := decodeRequest(req, admission.FencedResource)
	if err != nil {
		return badRequest(err)
	}
	bound := r.New
	if bound == nil {
		bound = r.Old
	}
	if bound != nil {
		r.LeaseName, _, _ = unstructured.NestedString(bound.Object, "spec", "leaseName")
	}
	verdict, err := v.decide(ctx, r)
	return v.respond(ctx, req, r, verdict, err)
}
