// Command worker is the chaos suite's lease contender: a real process that competes for a Lease and, while
// it leads, writes its target, recording every attempt (call, return, outcome, what it believed) as JSON
// lines in its history file. Every worker, leading or not, also reads the target, so that the checker can
// test the target as a register for linearizability.
//
// --mode=fenced elects with pkg/elector (fence-on-acquire as PostAcquire) and writes a FencedResource with
// pkg/fencing.Writer; --mode=unfenced is the negative control: client-go's leaderelection and a plain
// ConfigMap, the same loop, the epoch it believed stored in the data.
//
// SIGUSR1 arms the zombie (fault F3): before its next write, after its leadership check passed, the
// worker stops itself with SIGSTOP and goes on when the harness continues it. SIGUSR2 sets the rate of the
// fenced elector's clock (fault F8) to the number in the --clock-file.
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

type options struct {
	mode, namespace, lease, target, identity, user, history string
	clockFile                                               string
	leaseDuration, renewDeadline, retryPeriod, safetyMargin time.Duration
	writeInterval, readInterval, requestTimeout             time.Duration
}

// worker is one process's state shared by its loops.
type worker struct {
	o     options
	rec   *chaos.Recorder
	seq   atomic.Int64
	armed atomic.Bool
	// clock is the fenced elector's clock, at rate 1 until F8 skews it.
	clock *chaos.ScaledClock
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "fenced", "fenced (pkg/elector + FencedResource) or unfenced (client-go leaderelection + ConfigMap).")
	flag.StringVar(&o.namespace, "namespace", "", "Namespace of the Lease and the target.")
	flag.StringVar(&o.lease, "lease", "", "Lease to elect on.")
	flag.StringVar(&o.target, "target", "", "FencedResource (or ConfigMap) to write.")
	flag.StringVar(&o.identity, "identity", "", "Holder identity; also the process name in the history.")
	flag.StringVar(&o.user, "user", "", "The user the kubeconfig authenticates as (recorded in the history).")
	flag.StringVar(&o.history, "history", "", "History file (JSON lines), appended to.")
	flag.StringVar(&o.clockFile, "clock-file", "", "File holding the rate of the elector's clock (e.g. 0.5), read on SIGUSR2.")
	flag.DurationVar(&o.leaseDuration, "lease-duration", 3*time.Second, "Lease duration.")
	flag.DurationVar(&o.renewDeadline, "renew-deadline", 2*time.Second, "Renew deadline.")
	flag.DurationVar(&o.retryPeriod, "retry-period", 400*time.Millisecond, "Retry period.")
	flag.DurationVar(&o.safetyMargin, "safety-margin", 400*time.Millisecond, "Safety margin (fenced).")
	flag.DurationVar(&o.writeInterval, "write-interval", 250*time.Millisecond, "Time between two writes while leading.")
	flag.DurationVar(&o.readInterval, "read-interval", 400*time.Millisecond, "Time between two reads.")
	flag.DurationVar(&o.requestTimeout, "request-timeout", 10*time.Second, "Timeout of one write or read.")
	flag.Parse()
	if o.namespace == "" || o.lease == "" || o.target == "" || o.identity == "" || o.history == "" {
		fmt.Fprintln(os.Stderr, "worker: --namespace, --lease, --target, --identity and --history are required")
		os.Exit(2)
	}
	rec, err := chaos.NewRecorder(o.history)
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

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err == nil {
		cfg.QPS, cfg.Burst = 200, 400
		err = w.run(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
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
	if w.o.mode == "unfenced" {
		return w.runUnfenced(ctx, cs, c)
	}
	return w.runFenced(ctx, cfg, cs, c)
}

// nextOp returns a fresh operation id.
func (w *worker) nextOp() string { return fmt.Sprintf("%s:%d", w.o.identity, w.seq.Add(1)) }

// call records the start of an operation and returns the function that records its end.
func (w *worker) call(r chaos.Record) func(err error, v *chaos.Value) {
	r.Phase, r.Process, r.User, r.Target = "call", w.o.identity, w.o.user, w.o.namespace+"/"+w.o.target
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
	b, err := os.ReadFile(w.o.clockFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker: clock rate:", err)
		return
	}
	rate, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil || rate <= 0 {
		fmt.Fprintf(os.Stderr, "worker: clock rate %q in %s: not a positive number\n", b, w.o.clockFile)
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
