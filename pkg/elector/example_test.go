package elector_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/pkg/elector"
)

// A worker competes for the Lease "orders-writer", does its guarded work while it leads, carrying the
// epoch, and releases when done so that a standby takes over at once.
func Example() {
	cfg, err := rest.InClusterConfig() // or clientcmd.BuildConfigFromFlags outside a cluster
	if err != nil {
		panic(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
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
}
