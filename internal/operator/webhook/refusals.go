package webhook

import (
	"context"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencekit/fencekit/pkg/fencing"
)

// refusal is one write a webhook refused.
type refusal struct {
	webhook string // webhookFencedResources, webhookObjects or webhookLeases
	// regarding is the object the Event is recorded on; nil when the write names no object yet (a create
	// with generateName), then no Event is recorded.
	regarding runtime.Object
	object    klog.ObjectRef
	policy    string // the FencingPolicy that declares the object ("ns/name"), "" for a FencedResource
	lease     string
	err       *fencing.Error
}

// report logs, counts and records one refusal. A dry-run request only logs: the webhooks declare
// sideEffects: None, so a dry run must leave no Event and move no counter (the apiserver sends dry-run
// requests only to webhooks that declare no side effects, and the caller is told nothing was written).
func report(ctx context.Context, rec events.EventRecorder, req admission.Request, r refusal) {
	dryRun := req.DryRun != nil && *req.DryRun
	ctrl.LoggerFrom(ctx).Info("Refused a fenced write", "webhook", r.webhook, "kind", req.Kind.Kind, "object", r.object,
		"operation", req.Operation, "dryRun", dryRun, "policy", r.policy, "lease", r.lease, "reason", r.err.Reason,
		"epoch", r.err.Epoch, "leaseEpoch", r.err.LeaseEpoch, "message", r.err.Message)
	if dryRun {
		return
	}
	// A FencedResource names its Lease itself: the lease label names it only when the refusal was decided
	// against that Lease at an epoch; one that names a Lease that does not exist, or is refused before any
	// Lease is read, counts under "", or every name a user sends would be a series the operator keeps
	// (TestRound8RefusalSeriesPerLeaseName). An object's Lease is its FencingPolicy's.
	lease := r.lease
	if r.webhook == webhookFencedResources && r.err.LeaseEpoch == 0 || r.webhook == webhookLeases && req.Operation != admissionv1.Update {
		lease = "" // a refused create names a Lease that does not exist
	}
	countRefusal(r.webhook, req.Namespace, lease, string(r.err.Reason))
	if rec == nil || r.regarding == nil {
		return
	}
	action := "Write"
	if req.Operation == admissionv1.Delete {
		action = "Delete"
	}
	rec.Eventf(r.regarding, nil, corev1.EventTypeWarning, string(r.err.Reason), action, "%s", r.err.Message)
}
