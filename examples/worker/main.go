// Command worker is fencekit's reference worker: a process that competes for a Lease with pkg/elector and,
// while it leads, writes a FencedResource through pkg/fencing. Copy it into your own pod.
//
// Everything a user needs is in run and work below: about sixty lines. It imports only fencekit's public
// packages, so the directory builds when copied into another module. The flags and the demo-only
// --stop-before-write exist so that `fencekit-dev demo` and the end-to-end tests can drive it; --unfenced runs
// the same loop with client-go's leaderelection and a plain ConfigMap, to show what goes wrong without
// fencing (unfenced.go).
//
// It logs one JSON object per line on stdout (log/slog), which the demo reads.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

type options struct {
	elector                 elector.Config // the Lease, the identity and the timings, from the flags
	resource                string
	interval                time.Duration
	writes, stopBeforeWrite int
	unfenced                bool
}

var log = slog.New(slog.NewJSONHandler(os.Stdout, nil))

func main() {
	o := options{elector: elector.Config{Namespace: "default", Name: "demo-writer"}}
	o.elector.BindFlags(flag.CommandLine)
	flag.StringVar(&o.resource, "resource", "demo", "Name of the FencedResource (or, with --unfenced, ConfigMap) to write.")
	flag.DurationVar(&o.interval, "interval", time.Second, "Time between two writes.")
	flag.IntVar(&o.writes, "writes", 0, "Writes to make while leading: 0 writes until leadership ends, -1 makes none (the worker only holds the Lease).")
	flag.IntVar(&o.stopBeforeWrite, "stop-before-write", 0, "Demonstration only: just before write N, after its leadership check passed, log \"pausing\" and wait until the process has been stopped (SIGSTOP) and continued (SIGCONT) from outside, as a GC pause or CPU starvation could stop it (0: never).")
	flag.BoolVar(&o.unfenced, "unfenced", false, "Use client-go's leaderelection and a plain ConfigMap instead of fencekit.")
	flag.Parse()

	if err := start(o); err != nil {
		log.Error("worker failed", "error", err.Error())
		os.Exit(1)
	}
}

// start runs the worker until SIGINT or SIGTERM, or until its work ends.
func start(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	if o.unfenced {
		return runUnfenced(ctx, cfg, o)
	}
	return run(ctx, cfg, o)
}

// run competes for the Lease and, while leading, works.
func run(ctx context.Context, cfg *rest.Config, o options) error {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: fencingScheme()})
	if err != nil {
		return err
	}
	// Before leadership is reported, raise every FencedResource bound to the Lease to the new epoch: from
	// then on the previous holder's writes are refused, even if this worker never writes. The hook builds
	// its own client from cfg, without client-side rate limiting, so that a few hundred resources are
	// fenced within the PostAcquire timeout whatever QPS cfg has.
	fence, err := fencing.FenceOnAcquireForConfig(cfg)
	if err != nil {
		return err
	}
	var e *elector.Elector
	ecfg := o.elector
	ecfg.Client = clientset
	// The fence declares itself on the Lease: fencekit's webhook admits the writes from its copy of it.
	ecfg.PostAcquire = fence
	ecfg.OnStartedLeading = func(ctx context.Context, tok elector.Token) { work(ctx, e, fencing.NewWriter(c), tok, o) }
	ecfg.OnNewLeader = func(identity string, epoch int64) { log.Info("new leader", "holder", identity, "epoch", epoch) }
	e, err = elector.New(ecfg)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// work writes the resource every interval, carrying the token, until leadership ends or a write is refused.
func work(ctx context.Context, e *elector.Elector, w *fencing.Writer, tok elector.Token, o options) {
	log.Info("leading", "holder", tok.Holder, "epoch", tok.Epoch, "deadline", e.Deadline().Format(time.RFC3339Nano))
	defer log.Info("stopped leading", "holder", tok.Holder, "epoch", tok.Epoch)
	if o.writes < 0 {
		<-ctx.Done()
		return
	}
	key := types.NamespacedName{Namespace: o.elector.Namespace, Name: o.resource}
	for n := 1; o.writes == 0 || n <= o.writes; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(o.interval):
		}
		// A client-side check is necessary, never sufficient: the process can stop right after it.
		if !e.IsLeader() {
			return
		}
		pauseHere(n, o.stopBeforeWrite, tok.Holder, tok.Epoch)
		// The write does not use the leadership context: a request already under way when the process stops
		// still reaches the server after it resumes. Only the resource's epoch check stops it.
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := w.Set(wctx, tok, key, map[string]any{"writer": tok.Holder, "epoch": tok.Epoch, "write": n})
		cancel()
		switch {
		case err == nil:
			log.Info("write", "holder", tok.Holder, "epoch", tok.Epoch, "write", n, "accepted", true)
		case fencing.IsFenced(err):
			log.Info("write", "holder", tok.Holder, "epoch", tok.Epoch, "write", n, "accepted", false,
				"reason", string(fencing.ReasonOf(err)), "error", err.Error())
			return // fenced out: a newer holder exists
		default:
			log.Info("write", "holder", tok.Holder, "epoch", tok.Epoch, "write", n, "accepted", false, "error", err.Error())
		}
	}
}

// pauseHere holds before write n when asked to (demonstrations only): it logs "pausing" and waits until the
// process has been stopped with SIGSTOP and continued with SIGCONT from outside, which is what `fencekit
// demo` and the end-to-end tests do when they read "pausing", and what a GC pause or CPU starvation does
// to a process at any point. It subscribes to SIGCONT before it says "pausing", so nothing that comes after
// the pause (the write's 10 s timeout) starts before the process has been stopped and continued.
func pauseHere(n, stopBeforeWrite int, holder string, epoch int64) {
	if n != stopBeforeWrite {
		return
	}
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	log.Info("pausing", "holder", holder, "epoch", epoch, "write", n)
	<-cont
	log.Info("resumed", "holder", holder, "epoch", epoch, "write", n)
}

// fencingScheme is all the fenced writer's client needs to know.
func fencingScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = fencingv1alpha1.AddToScheme(s)
	return s
}
