// Package webhook is fencekit's validating admission webhook for FencedResources: it admits a write that
// sets or changes spec.data or spec.epoch only if pkg/fencing.CheckWrite does, reading the bound Lease with
// a consistent read (never from a cache), and it guards deletion with pkg/fencing.CheckDelete.
package webhook
