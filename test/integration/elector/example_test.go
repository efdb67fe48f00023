package elector_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/fencekit/fencekit/pkg/elector"
)

// pkg/elector's package example, run on the control plane (namespace default) so that its output is
// checked: a worker competes for the Lease "orders-writer", does its guarded work while it leads, carrying
// the epoch, and releases when done so that a standby takes over at once.
func Example() {
	cs, err := kubernetes.NewForConfig(env.Config) // your rest.Config: rest.InClusterConfig() in a pod
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	e, err := elector.New(elector.Config{
		Client:    cs,
		Namespace: "default",
		Name:      "orders-writer",
		Identity:  "worker-a",
		OnStartedLeading: func(ctx context.Context, t elector.Token) {
			// Carry t on every guarded write (for example with package fencing's Writer): the resource
			// refuses writes with an epoch below the highest it has admitted.
			fmt.Println("leading:", t.Holder, t.Epoch > 0)
			deadline, _ := ctx.Deadline() // the safe-work deadline: stop before it
			fmt.Println("safe to work for at most 12.85s:", time.Until(deadline) <= 12850*time.Millisecond)
			stop() // done: end Run, which releases the Lease
		},
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
	}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		panic(err)
	}
	if err := e.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("leader after Run:", e.IsLeader())
	// Output:
	// leading: worker-a true
	// safe to work for at most 12.85s: true
	// stopped leading
	// leader after Run: false
}
