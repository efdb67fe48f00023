package fencing

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// Mechanisms that refuse a fenced write, as the mechanism label of fencekit_writer_refusals_total names them.
const (
	// MechanismCRDRule is the FencedResource CRD's transition rule (spec.epoch never goes down), applied
	// by the apiserver itself, before any webhook: no fencekit component sees that refusal but the writer.
	MechanismCRDRule = "crd_rule"
	// MechanismWebhook is fencekit's admission webhook.
	MechanismWebhook = "webhook"
)

// writerRefusals counts, in the writer's own process, the fenced writes of the Writer that the apiserver
// refused. It is the only count of refusals by the CRD rule, which run inside the apiserver where the
// operator cannot see them; it counts writes (one per refused Writer call), unlike the webhook's
// fencekit_webhook_admission_refusals_total, which counts admission requests.
var writerRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencekit_writer_refusals_total",
	Help: "Fenced writes of this process's fencing.Writer refused by the apiserver, by lease (namespace/name), " +
		"mechanism (crd_rule: the FencedResource CRD's epoch rule; webhook: fencekit's admission webhook) and fencing reason.",
}, []string{"lease", "mechanism", "reason"})

// fenceLeft is how many objects this process's last fence-on-acquire of a Lease left unraised.
var fenceLeft = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "fencekit_fence_on_acquire_left",
	Help: "Objects (FencedResources or objects a FencingPolicy declares) this process's last fence-on-acquire of the lease " +
		"(namespace/name) left unraised when its budget, half of the elector's PostAcquireTimeout, ran out (or where the raise would have made an object no holder wrote count as written), by kind (FencedResource, object); " +
		"the holder's first write to each raises it.",
}, []string{"lease", "kind"})

func init() {
	ctrlmetrics.Registry.MustRegister(writerRefusals, fenceLeft)
}

// refusedBy returns the mechanism and reason of a write refused by the apiserver for fencing: the webhook
// when the API status names the reason as a cause's type (Error.APIStatus), the CRD's epoch rule when
// ReasonOf recognises its message. It returns "", "" for any other error, including an *Error the writer
// raised itself before sending (nothing was refused by the apiserver).
func refusedBy(err error) (mechanism string, reason protocol.Reason) {
	reason = ReasonOf(err)
	if reason == "" {
		return "", ""
	}
	var fe *Error
	if errors.As(err, &fe) {
		return "", ""
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if protocol.Reason(c.Type) == reason {
				return MechanismWebhook, reason
			}
		}
	}
	return MechanismCRDRule, reason
}

// countRefusal counts err in fencekit_writer_refusals_total if the apiserver refused the write for fencing.
func countRefusal(lease string, err error) {
	if mechanism, reason := refusedBy(err); mechanism != "" {
		writerRefusals.WithLabelValues(lease, mechanism, string(reason)).Inc()
	}
}
