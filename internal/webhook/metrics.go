package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// rejectedWrites counts FencedResource writes refused by the webhook. Writes whose epoch is below the one
// the resource already stores are refused earlier, by the CRD's own rule inside the apiserver, and never
// reach the webhook: the apiserver answers them with 422 and they are not counted here. It counts the
// webhook's refusals, which is one per refused write except when the apiserver asks twice: its first
// attempt at a write works on its watch cache's copy of the object, and when that copy was stale (a status
// write a moment earlier) it runs admission again on the current object.
var rejectedWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencekit_stale_writes_rejected_total",
	Help: "FencedResource writes refused by the fencekit admission webhook, by namespace, lease and fencing reason.",
}, []string{"namespace", "lease", "reason"})

func init() {
	metrics.Registry.MustRegister(rejectedWrites)
}
