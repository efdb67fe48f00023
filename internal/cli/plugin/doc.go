// Package plugin is `kubectl fencekit`, the kubectl plugin that shows fencekit's state as the apiserver
// holds it: `status` lists the fenced Leases (holder, epoch, expiry, the holder's safe-work deadline), the
// FencedResources bound to them and whether each is behind its Lease, and the recent refusals recorded by
// fencekit's webhooks; `explain OBJECT` says, for a FencedResource or an object a FencingPolicy declares,
// which writes would be admitted now and why the others would be refused.
//
// It only reads. Its decisions are the admission rule's (internal/operator/admission: Decide, and
// CoverageOf, the coverage the object webhook decides by), evaluated on what it reads: the answer is the
// webhook's as of that read, not a promise about a later write (the Lease may move in between).
// cmd/kubectl-fencekit only calls Run.
package plugin
