// Package webhook is fencekit's validating admission webhooks, adapters over internal/operator/admission.Decide:
// they decode the request, look up the policies, read the bound Lease the rule asks for (a quorum read, or
// the watch-fed LeaseCache where the rule allows it) and report a refusal; they decide nothing. The
// FencedResource webhook decides writes and deletes of FencedResources; the object webhook (ObjectsPath),
// which the operator points the per-namespace webhooks it generates from the FencingPolicies at, decides
// those of declared objects; and the FencingPolicy webhook refuses what the CRD's schema cannot judge
// alone (internal/operator/admission.ValidatePolicy). docs/design/admission.md describes the rule.
package webhook
