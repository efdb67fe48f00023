package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencekit/fencekit/internal/operator/admission"
)

// LeasesPath is where the Lease webhook serves. The operator points the webhook it keeps for fenced Leases
// (in the ValidatingWebhookConfiguration of the object webhooks) at it.
const LeasesPath = "/fence-leases"

// LeaseValidator decides the writes to fenced Leases that neither acquire, renew nor release them (the
// webhook configuration sends it no others): the admission rule bounds their size
// (admission.MaxFreeLeaseBytes), which the Lease policy's CEL cannot measure. It reads nothing.
type LeaseValidator struct {
	decider
}

// NewLeaseValidator returns a LeaseValidator.
func NewLeaseValidator(opts ...Option) *LeaseValidator {
	return &LeaseValidator{decider: newDecider(webhookLeases, nil, opts)}
}

// SetupLeasesWithManager registers the Lease webhook on mgr's webhook server at LeasesPath, recording
// refusals as Events with the manager's recorder.
func SetupLeasesWithManager(mgr manager.Manager, opts ...Option) error {
	opts = append([]Option{WithEventRecorder(mgr.GetEventRecorder(eventSource))}, opts...)
	mgr.GetWebhookServer().Register(LeasesPath, &webhook.Admission{Handler: NewLeaseValidator(opts...)})
	return nil
}

// Handle decides one admission request.
func (v *LeaseValidator) Handle(ctx context.Context, req ctrladmission.Request) ctrladmission.Response {
	r, err := decodeRequest(req, admission.FencedLease)
	if err != nil {
		return badRequest(err)
	}
	r.LeaseName = r.Name
	return v.respond(ctx, req, r, admission.Decide(r, nil, v.clock.Now()), nil)
}
