// Package e2e runs the paused lock holder end to end: a local control plane with fencekit installed, the
// operator, and real worker processes (examples/worker) stopped and resumed with real SIGSTOP and SIGCONT
// or killed with SIGKILL. It drives the same scenarios as `fencekit-dev demo` (internal/dev/demo) and asserts their
// exact outcome.
package e2e
