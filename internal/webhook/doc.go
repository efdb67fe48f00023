// Package webhook is fencekit's validating admission webhook for FencedResources: it admits a write that
// changes a fenced field (spec.data, spec.epoch, the writer annotation, the deletion marker, owner
// references) only if pkg/fencing.CheckWrite does, given the fencing token the request presents as its
// field manager and the bound Lease read with a consistent read (never from a cache), and it guards
// deletion with pkg/fencing.CheckDelete.
//
// It also serves the object webhook (ObjectsPath), which the operator points the per-namespace webhooks it
// generates from the FencingPolicies at: it decides writes of declared objects with
// pkg/fencing.CheckObjectWrite and CheckObjectDelete, reading the Lease the same way; and the FencingPolicy
// webhook, which refuses what the CRD's schema cannot judge alone (pkg/fencing.ValidatePolicy).
package webhook
