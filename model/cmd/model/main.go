// Command model runs every check of fencekit's protocol model (model/fencekit.pml) with spin and prints,
// for each, the state count, depth and time, and for each violation the counterexample as a story. It
// exits non-zero if the design fails or a mutation is not refuted. `make model` runs it.
//
// Checks run in parallel, one per core (-parallel), as long as their state stores (each check's
// MemoryMB) fit in -memory; the report keeps the order of model.Checks.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/fencekit/fencekit/model"
)

func main() { os.Exit(run()) }

// run runs the checks and returns the exit code: 0 when every check holds, 1 when one fails, 2 when one
// could not run.
func run() int {
	only := flag.String("run", "", "run only the checks whose name contains this")
	full := flag.Bool("full", false, "also run the long checks (design-widen, design-deletes: minutes each)")
	parallel := flag.Int("parallel", runtime.NumCPU(), "checks run at the same time")
	memory := flag.Int64("memory", 16000, "MB the state stores of the checks running at the same time may take together")
	flag.Parse()
	if *parallel < 1 || *memory < 1 {
		fmt.Fprintf(os.Stderr, "model: -parallel (%d) and -memory (%d) must be at least 1\n", *parallel, *memory)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	var checks []model.Check
	for _, c := range model.Checks {
		if *only != "" && !strings.Contains(c.Name, *only) || c.Full && !*full && *only == "" {
			continue
		}
		checks = append(checks, c)
	}
	start := time.Now()
	results := make([]model.Result, len(checks))
	errs := make([]error, len(checks))
	done := make([]chan struct{}, len(checks))
	slots, mem := semaphore.NewWeighted(int64(*parallel)), semaphore.NewWeighted(*memory)
	var wg sync.WaitGroup
	for i, c := range checks {
		done[i] = make(chan struct{})
		need := int64(model.MemoryMB)
		if c.MemoryMB != 0 {
			need = int64(c.MemoryMB)
		}
		need = min(need, *memory) // a check larger than the budget runs alone
		wg.Go(func() {
			defer close(done[i])
			if err := mem.Acquire(ctx, need); err != nil {
				errs[i] = err
				return
			}
			defer mem.Release(need)
			if err := slots.Acquire(ctx, 1); err != nil {
				errs[i] = err
				return
			}
			defer slots.Release(1)
			results[i], errs[i] = model.Run(ctx, c, model.Bound)
		})
	}
	failed := 0
	for i, c := range checks {
		<-done[i]
		fmt.Printf("== %s: %s\n", c.Name, c.About)
		if errs[i] != nil {
			fmt.Fprintf(os.Stderr, "model: %s: %v\n", c.Name, errs[i])
			return 2
		}
		r := results[i]
		verdict := "verified: no violation"
		if r.Violated {
			verdict = fmt.Sprintf("refuted: %s violated (%s)", r.Property, r.Assertion)
		}
		fmt.Printf("   %s; %d states, %d transitions, depth %d, %s\n", verdict, r.States, r.Transitions, r.Depth, r.Elapsed.Round(10*time.Millisecond))
		for _, l := range r.Story {
			fmt.Printf("   | %s\n", l)
		}
		if !r.OK() {
			failed++
			want := "no violation"
			if c.Refute {
				want = "a violation of " + c.Property
			}
			fmt.Printf("   FAIL: want %s\n", want)
		}
	}
	wg.Wait()
	fmt.Printf("model: %d checks, %d failed, %s (%d at a time)\n", len(checks), failed, time.Since(start).Round(time.Second), *parallel)
	if failed > 0 {
		return 1
	}
	return 0
}
