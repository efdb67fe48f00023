package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencekit/fencekit/internal/dev/demo"
	"github.com/fencekit/fencekit/pkg/elector"
)

func runDemo(args []string) error {
	fs := newFlagSet("demo", "fencekit-dev demo [--scenario paused-holder|postgres|controller] [--quick] [flags]",
		"Show the paused lock holder: a stale write refused by fencekit, and accepted without it.")
	quick := fs.Bool("quick", false, "Short timings (4s lease, 6s pause) instead of the design's (15s lease, 20s pause).")
	leaseDuration := fs.Duration("lease-duration", 0, "Lease duration (default 15s, or 4s with --quick); the renew deadline and retry period scale with it.")
	pause := fs.Duration("pause", 0, "How long W1 stays stopped (default 20s, or 6s with --quick); must exceed the lease duration.")
	kubeconfig := fs.String("kubeconfig", "", "Run against this cluster, where fencekit was installed with Helm, instead of a local control plane.")
	repo := fs.String("repo", ".", "The fencekit repository (examples/worker and config/).")
	scenario := fs.String("scenario", string(demo.PausedHolder), "paused-holder (the default: a worker writing a FencedResource; a ConfigMap unfenced), postgres (a psql script under 'fencekit run' updating a PostgreSQL row, fenced by a fence column; the same row without it unfenced) or controller (examples/controller, a controller-runtime operator fenced with managed.Fence and a FencingPolicy). postgres and controller run on the local control plane only.")
	if err := parse(fs, args); err != nil {
		return err
	}
	s := demo.DefaultSettings()
	if *quick {
		s = demo.QuickSettings()
	}
	if *leaseDuration > 0 {
		ratio := float64(*leaseDuration) / float64(s.LeaseDuration)
		s.LeaseDuration = *leaseDuration
		s.RenewDeadline = scale(s.RenewDeadline, ratio)
		s.RetryPeriod = scale(s.RetryPeriod, ratio)
		s.SafetyMargin = scale(s.SafetyMargin, ratio)
	}
	if *pause > 0 {
		s.Pause = *pause
	}
	if s.Pause <= s.LeaseDuration {
		return fmt.Errorf("--pause %s must exceed the lease duration %s, or W1's lease never expires", s.Pause, s.LeaseDuration)
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		return err
	}
	switch demo.Scenario(*scenario) {
	case demo.PausedHolder:
	case scenarioPostgres:
		if *kubeconfig != "" {
			return fmt.Errorf("--scenario postgres starts its own PostgreSQL server and runs on the local control plane only (drop --kubeconfig)")
		}
	case demo.Controller:
		if *kubeconfig != "" {
			return fmt.Errorf("--scenario controller runs on the local control plane only (drop --kubeconfig)")
		}
		return runControllerDemo(root, s)
	default:
		return fmt.Errorf("unknown --scenario %q: want %s, %s or %s", *scenario, demo.PausedHolder, scenarioPostgres, demo.Controller)
	}
	ctrllog.SetLogger(logr.Discard()) // the in-process operator's logs would drown the story

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var target *demo.Target
	var teardown func()
	if *kubeconfig != "" {
		target, teardown, err = demo.Existing(ctx, root, *kubeconfig)
	} else {
		target, teardown, err = demo.Local(ctx, root, os.Stderr)
	}
	if err != nil {
		return err
	}
	defer teardown()

	style := demo.Style{Color: isTerminal(os.Stdout)}
	runs := "Two runs at once: fenced by fencekit, and unfenced (client-go leaderelection + a plain ConfigMap)."
	if *scenario == scenarioPostgres {
		runs = `Each worker is ` + "`fencekit run`" + ` running a psql script that updates one PostgreSQL row with
$FENCEKIT_EPOCH. Two runs at once: fenced (the UPDATE requires the row's fence_epoch <= the token and raises
it), and unfenced (the same UPDATE without that condition, under the same elector).`
	}
	window := elector.SafeWindow(s.LeaseDuration, elector.DefaultMaxClockDrift, s.SafetyMargin)
	fmt.Printf(`
The paused lock holder. Two workers elect a leader on a Lease (lease %s, renew deadline %s, retry %s).
The leader's safe-work deadline is %s x (1 - 0.01) - %s = %.2fs after each renewal is sent. W1 leads,
writes once, then passes its leadership check and is stopped with SIGSTOP just before its second write,
for %s: past its lease. W2 takes over and writes. Then W1 is resumed with SIGCONT and makes its write.
%s

`, s.LeaseDuration, s.RenewDeadline, s.RetryPeriod, s.LeaseDuration, s.SafetyMargin, window.Seconds(), s.Pause, runs)

	live := printer(func(run string, e demo.Event) string {
		if e.Msg == "new leader" || e.Msg == "stopped leading" || e.Msg == "resumed" {
			return ""
		}
		return style.Line(run, e)
	})
	run := func(fenced bool) (*demo.Result, error) {
		return demo.Run(ctx, *target, s, demo.PausedHolder, fenced, live(fenced))
	}
	if *scenario == scenarioPostgres {
		pg, stopPG, err := demo.StartPostgres(root)
		if err != nil {
			return err
		}
		defer stopPG()
		run = func(fenced bool) (*demo.Result, error) {
			return demo.RunPostgres(ctx, *target, pg, s, fenced, live(fenced))
		}
	}
	fenced, unfenced, err := both(ctx, run)
	if err != nil {
		return err
	}
	fmt.Println()
	style.Summary(os.Stdout, fenced, unfenced)
	fmt.Println()
	return conclude(demo.Check(fenced, unfenced),
		"fencekit refused the paused holder's stale write (epoch %d < %d) and kept W2's data; without fencing, W1 overwrote W2.\n",
		fenced.W1Epoch, fenced.W2Epoch)
}

// conclude returns the demo's check failure, or prints its conclusion when the check passed.
func conclude(check error, format string, args ...any) error {
	if check != nil {
		return check
	}
	fmt.Printf(format, args...)
	return nil
}

// scenarioPostgres is the paused holder against a PostgreSQL row (demo.RunPostgres).
const scenarioPostgres = "postgres"

func scale(d time.Duration, ratio float64) time.Duration { return time.Duration(float64(d) * ratio) }

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("NO_COLOR") == ""
}

// both plays the fenced and the unfenced run at once and returns their results, or the first error.
func both[R any](ctx context.Context, run func(fenced bool) (R, error)) (fenced, unfenced R, err error) {
	var ferr, uerr error
	var wg sync.WaitGroup
	wg.Go(func() { fenced, ferr = run(true) })
	wg.Go(func() { unfenced, uerr = run(false) })
	wg.Wait()
	switch {
	case ctx.Err() != nil:
		return fenced, unfenced, fmt.Errorf("interrupted; every process the demo started has been stopped")
	case ferr != nil:
		return fenced, unfenced, fmt.Errorf("fenced run: %w", ferr)
	case uerr != nil:
		return fenced, unfenced, fmt.Errorf("unfenced run: %w", uerr)
	}
	return fenced, unfenced, nil
}

// printer returns, for the fenced or the unfenced run, the function that prints each of its events as the
// line that line makes of it (none when it returns ""), one line at a time.
func printer(line func(run string, e demo.Event) string) func(fenced bool) func(demo.Event) {
	var mu sync.Mutex
	return func(fenced bool) func(demo.Event) {
		run := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
		return func(e demo.Event) {
			l := line(run, e)
			if l == "" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Println(l)
		}
	}
}
