package chaos

import (
	"flag"
	"reflect"
	"testing"
	"time"
)

// TestWorkerFlagsRoundTrip: the command line the harness writes for a worker parses back, in the worker,
// to the same WorkerFlags; a field the harness leaves empty keeps the worker's default.
func TestWorkerFlagsRoundTrip(t *testing.T) {
	want := WorkerFlags{Mode: "unfenced", Namespace: "ns", Lease: "target-writer", Target: "target", Identity: "w1-2",
		User: "chaos-w1", History: "/tmp/w1-2.ops.jsonl", ClockFile: "/tmp/w1-2.clock", Timings: ShortTimings()}
	got := WorkerFlags{Mode: "fenced", RequestTimeout: 10 * time.Second}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	got.RegisterFlags(fs)
	if err := fs.Parse(want.Args()); err != nil {
		t.Fatalf("parsing %q: %v", want.Args(), err)
	}
	want.RequestTimeout = 10 * time.Second // left out by Args: the worker's default
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the worker parsed %q to %+v, want %+v", want.Args(), got, want)
	}
}
