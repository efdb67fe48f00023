// Package webhook is fencekit's validating admission webhook for FencedResources: it admits a write that
// changes a fenced field (spec.data, spec.epoch, the writer annotation, the deletion marker, owner
// references) only if pkg/fencing.CheckWrite does, given the fencing token the request presents as its
// field manager and the bound Lease read with a consistent read (never from a cache), and it guards
// deletion with pkg/fencing.CheckDelete.
package webhook
