package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencekit/fencekit/internal/dev/demo"
)

// runControllerDemo is `fencekit demo --scenario controller`.
func runControllerDemo(root string, s demo.Settings) error {
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	target, teardown, err := demo.Local(ctx, root, os.Stderr)
	if err != nil {
		return err
	}
	defer teardown()
	dir, err := os.MkdirTemp("", "fencekit-demo-controller-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	fmt.Fprintln(os.Stderr, "building examples/controller")
	if target.ControllerBinary, err = demo.Build(root, dir, "./examples/controller"); err != nil {
		return err
	}
	fmt.Printf(`
The paused controller. examples/controller, an ordinary controller-runtime operator, renders a source
ConfigMap into a ConfigMap, a Deployment (and its status) and a canary Deployment. Two replicas of one user
elect a leader (lease %s). Round 2 turns the canary off: the leader A takes its token for each of its four
writes (update, patch, status, delete) and is stopped with SIGSTOP before sending any. Round 3 turns the
canary back on; B takes over and renders it. Then A is resumed. Two runs at once: fenced (managed.Fence and
a FencingPolicy), and unfenced (controller-runtime's own leader election).

`, s.LeaseDuration)
	style := demo.Style{Color: isTerminal(os.Stdout)}
	live := printer(style.ControllerLine)
	fenced, unfenced, err := both(ctx, func(fenced bool) (*demo.ControllerResult, error) {
		return demo.RunController(ctx, *target, s, fenced, live(fenced))
	})
	if err != nil {
		return err
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintf(tw, "\tfencekit (managed.Fence + FencingPolicy)\tunfenced (controller-runtime leader election)\n")
	fmt.Fprintf(tw, "A, B leaders\tepoch %d, epoch %d\tyes, yes\n", fenced.W1Epoch, fenced.W2Epoch)
	for _, op := range []string{"update", "patch", "status", "delete"} {
		fmt.Fprintf(tw, "A's late %s\t%s\t%s\n", op, demo.Verdict(late(fenced, op)), demo.Verdict(late(unfenced, op)))
	}
	fmt.Fprintf(tw, "left after A resumed\t%v\t%v\n", after(fenced), after(unfenced))
	_ = tw.Flush()
	fmt.Println()
	return conclude(demo.ControllerCheck(fenced, unfenced),
		"fencekit refused all four of the paused leader's writes (epoch %d < %d) and kept B's round 3; without fencing, A's stale round 2 was admitted and deleted B's canary.\n",
		fenced.W1Epoch, fenced.W2Epoch)
}

// late is r's late write op (the zero Event if it made none).
func late(r *demo.ControllerResult, op string) demo.Event {
	for _, e := range r.Late {
		if e.Op == op {
			return e
		}
	}
	return demo.Event{Error: "not seen"}
}

func after(r *demo.ControllerResult) string {
	s := r.After.String()
	if r.After.Canary && r.After.CanaryUID != r.Before.CanaryUID {
		s += " (B's was deleted, A created it again)"
	}
	return s
}
