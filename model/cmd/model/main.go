// Command model runs every check of fencekit's protocol model (model/fencekit.pml) with spin and prints,
// for each, the state count, depth and time, and for each violation the counterexample as a story. It
// exits non-zero if the design fails or a mutation is not refuted. `make model` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/fencekit/fencekit/model"
)

func main() {
	only := flag.String("run", "", "run only the checks whose name contains this")
	full := flag.Bool("full", false, "also run the long checks (design-widen, design-deletes: minutes each)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start, failed, ran := time.Now(), 0, 0
	for _, c := range model.Checks {
		if *only != "" && !strings.Contains(c.Name, *only) || c.Full && !*full && *only == "" {
			continue
		}
		ran++
		fmt.Printf("== %s: %s\n", c.Name, c.About)
		r, err := model.Run(ctx, c, model.Bound)
		if err != nil {
			fmt.Fprintf(os.Stderr, "model: %s: %v\n", c.Name, err)
			os.Exit(2)
		}
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
	fmt.Printf("model: %d checks, %d failed, %s\n", ran, failed, time.Since(start).Round(time.Second))
	if failed > 0 {
		os.Exit(1)
	}
}
