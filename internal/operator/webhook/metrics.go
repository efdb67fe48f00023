package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Names of the webhooks, as the webhook label of admissionRefusals gives them.
const (
	webhookFencedResources = "fencedresources"
	webhookObjects         = "objects"
	webhookLeases          = "leases"
)

// admissionRefusals counts the admission requests a fencekit webhook refused. It counts admissions, not
// writes: kube-apiserver runs admission for a write a second time when its first attempt worked on a stale
// copy of the object from its watch cache (a status write a moment earlier), so one refused write can count
// twice. Dry-run requests (sideEffects: None) are not counted. Refusals made inside the apiserver (the
// CRD's epoch rule, the Lease policy) never reach a webhook: see docs/design/observability.md for
// where they are counted.
var admissionRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencekit_webhook_admission_refusals_total",
	Help: "Admission requests refused by a fencekit webhook (webhook: fencedresources, objects or leases), by namespace, lease and fencing reason. " +
		"Counts admissions: the apiserver may admit one write twice. Dry-run requests are not counted.",
}, []string{"webhook", "namespace", "lease", "reason"})

// The sources a webhook's decision read its Lease from.
const (
	sourceCache     = "cache"
	sourceAPIServer = "apiserver"
)

// leaseReads counts the webhooks' decisions that needed the bound Lease, by where they read it: "cache"
// (admitted on the LeaseCache, no request to the apiserver) or "apiserver" (a quorum read). It shows
// whether the fast path is taken, and how often writes fall back to the quorum read.
var leaseReads = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencekit_webhook_lease_reads_total",
	Help: "Decisions of a fencekit webhook (webhook: fencedresources, objects or leases) that needed the bound Lease, by source: " +
		"cache (admitted on the watch-fed copy of a Lease that declares fence-on-acquire) or apiserver (a quorum read).",
}, []string{"webhook", "source"})

// heldBack counts the writes without the token a webhook refused for a moment because the holder's write
// was being decided on the same stored object (admission.Request.Racing). They are not refusals of the
// writer (no Event is recorded), and are counted apart from admissionRefusals.
var heldBack = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "fencekit_webhook_held_back_total",
	Help: "Writes without a fencing token a fencekit webhook refused for a moment, by webhook, namespace and lease, because the Lease holder's write " +
		"was being decided on the same stored object; the writer sends it again. Counts admissions.",
}, []string{"webhook", "namespace", "lease"})

func init() {
	metrics.Registry.MustRegister(admissionRefusals, leaseReads, heldBack)
}

// countRefusal counts one refused admission request of webhook.
func countRefusal(webhook, namespace, lease, reason string) {
	admissionRefusals.WithLabelValues(webhook, namespace, lease, reason).Inc()
}
