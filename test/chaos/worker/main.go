// Command worker is the chaos suite's lease contender: a real process that competes for a Lease and, while
// it leads, writes its target. Its fenced path makes the calls examples/worker (the reference worker users
// copy) makes: pkg/elector with fencing.FenceOnAcquireForConfig as PostAcquire, and fencing.Writer.Set with
// the token. It is its own program because everything around those calls is instrumentation a user's
// worker has no use for, and the checker needs:
//
//   - every fence, write and read is recorded, a call record before it and a return record after it (the
//     time, the operation id stored in the data, what the worker believed: the epoch, that it led, the
//     time left to its safe-work deadline), as JSON lines in its --history file;
//   - every worker, leading or not, reads the target every --read-interval, so that the checker can test
//     the target as a register for linearizability;
//   - a refused write does not end the leadership's loop (examples/worker returns on a refusal): until
//     the elector learns that it lost the Lease, every attempt is history;
//   - SIGUSR1 arms the zombie (fault F3): before its next write, after its leadership check passed, the
//     worker stops itself with SIGSTOP and goes on when the harness continues it (examples/worker's
//     --stop-before-write pauses at a write number fixed when it starts, for the demo);
//   - the elector reads a rate-scaled clock (elector.WithClock), set on SIGUSR2 to the rate in the
//     --clock-file (fault F8);
//   - --mode=unfenced, the negative control (client-go's leaderelection and a plain ConfigMap, like
//     examples/worker --unfenced), records the Lease's leaseTransitions as the term it believed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/chaos"
	"github.com/fencekit/fencekit/test/chaos/selfstop"
)

// worker is one process's state shared by its loops.
type worker struct {
	o     chaos.WorkerFlags
	rec   *chaos.Recorder
	seq   atomic.Int64
	armed atomic.Bool
	// clock is the fenced elector's clock, at rate 1 until F8 skews it.
	clock *chaos.ScaledClock
}

func main() {
	o := chaos.WorkerFlags{Mode: "fenced", Timings: chaos.ShortTimings(), RequestTimeout: 10 * time.Second}
	o.RegisterFlags(flag.CommandLine)
	flag.Parse()
	if o.Namespace == "" || o.Lease == "" || o.Target == "" || o.Identity == "" || o.History == "" {
		fmt.Fprintln(os.Stderr, "worker: --namespace, --lease, --target, --identity and --history are required")
		os.Exit(2)
	}
	rec, err := chaos.NewRecorder(o.History)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	w := &worker{o: o, rec: rec, clock: chaos.NewScaledClock(clock.RealClock{})}
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			w.armed.Store(true)
		}
	}()
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	go func() {
		for range usr2 {
			w.setClockRate()
		}
	}()

	if err := w.start(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// start runs the worker until SIGINT or SIGTERM.
func (w *worker) start() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	return w.run(ctx, cfg)
}

// run competes for the Lease in --mode, with a clientset for the Lease and a client for the target (a
// FencedResource or a ConfigMap).
func (w *worker) run(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = fencingv1alpha1.AddToScheme(s)
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	if w.o.Mode == "unfenced" {
		return w.runUnfenced(ctx, cs, c)
	}
	return w.runFenced(ctx, cfg, cs, c)
}

// nextOp returns a fresh operation id.
func (w *worker) nextOp() string { return fmt.Sprintf("%s:%d", w.o.Identity, w.seq.Add(1)) }

// call records the start of an operation and returns the function that records its end.
func (w *worker) call(r chaos.Record) func(err error, v *chaos.Value) {
	r.Phase, r.Process, r.User, r.Target = "call", w.o.Identity, w.o.User, w.o.Namespace+"/"+w.o.Target
	r.At = time.Now().UnixNano()
	w.must(w.rec.Add(r))
	return func(err error, v *chaos.Value) {
		ret := chaos.Record{Phase: "return", Op: r.Op, Kind: r.Kind, Process: r.Process, Value: v, At: time.Now().UnixNano()}
		ret.Outcome, ret.Reason = chaos.Classify(err)
		if err != nil {
			ret.Error = err.Error()
		}
		w.must(w.rec.Add(ret))
	}
}

func (w *worker) must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: recording history:", err)
		os.Exit(1)
	}
}

// setClockRate reads the rate of the elector's clock from --clock-file (F8).
func (w *worker) setClockRate() {
	b, err := os.ReadFile(w.o.ClockFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: clock rate:", err)
		return
	}
	rate, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil || rate <= 0 {
		fmt.Fprintf(os.Stderr, "worker: clock rate %q in %s: not a positive number\n", b, w.o.ClockFile)
		return
	}
	w.clock.SetRate(rate)
	fmt.Fprintf(os.Stderr, "%s worker: the elector's clock runs at %vx\n", time.Now().Format(time.RFC3339Nano), rate)
}

// pauseIfArmed is the zombie: stop after the leadership check, before the write, until continued.
func (w *worker) pauseIfArmed() {
	if w.armed.CompareAndSwap(true, false) {
		if err := selfstop.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
}
