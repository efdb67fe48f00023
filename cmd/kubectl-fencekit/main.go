// Command kubectl-fencekit is the kubectl plugin `kubectl fencekit`: fencekit's Leases, fenced resources
// and refusals as the apiserver holds them (status), and why a write to an object would be refused now
// (explain). Install it on the PATH (go install github.com/fencekit/fencekit/cmd/kubectl-fencekit@latest)
// and kubectl finds it; see docs/kubectl-plugin.md. The work is done in internal/cli/plugin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/fencekit/fencekit/internal/cli/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := plugin.Run(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubectl fencekit: %v\n", err)
		os.Exit(1)
	}
}
