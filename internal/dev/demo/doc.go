// Package demo runs the paused lock holder with real worker processes (examples/worker) and real
// SIGSTOP/SIGCONT, fenced by fencekit or, for contrast, with client-go's leaderelection and a plain
// ConfigMap. `fencekit-dev demo` renders its results; test/e2e asserts on them.
package demo
