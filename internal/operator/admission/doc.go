// Package admission is fencekit's one admission rule: whether a write to a fenced object is admitted.
//
// A fenced object is a FencedResource, or an object a FencingPolicy covers (its labels match a selector
// of a policy of its namespace before or after the write). Decide is a pure function of the request (user,
// field manager, operation, subresource), the stored and the resulting object, coverage before and after
// the write, and one parsed view of the bound Lease; it returns the verdict and, for a refusal, the
// *fencing.Error the client sees. The two webhooks (internal/operator/webhook) only decode, look up and report.
//
// What it guarantees, with the Lease policy (config/policy/lease_policy.yaml) and fence-on-acquire
// (pkg/fencing):
//   - no write presenting epoch e is admitted to a fenced object once the holder of an epoch above e was
//     handed its token;
//   - a write that presents no token changes only what the allowlist (free.go) proves harmless, within its
//     bounds: a stale or non-holder writer cannot use it to change data, ownership, coverage or the
//     holder's next write, nor lock the holder out;
//   - a refusal names the object, the field and the numbers.
//
// Three files hold it: decide.go the decision (Decide and its cases); request.go what it reads (the
// Request, whose strings Complete reads once with the wire contract, its User, the Lease view); free.go
// what a write changes (its paths, its managedFields ownership, its free part and the bounds on it).
//
// Cases (cases.go) is the threat model as data: actor, write, Lease state, verdict. It drives this
// package's tests and the envtest tests of the webhooks and of the Lease policy.
package admission
