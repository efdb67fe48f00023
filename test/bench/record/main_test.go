package main

import (
	"io"
	"strings"
	"testing"
)

// TestReadKeepsTheMedianOfRepeatedRuns: a benchmark run more than once records the median of each figure,
// except a count of failures, which records its worst run (2 Leases lost in one run of three is 2, not 0).
func TestReadKeepsTheMedianOfRepeatedRuns(t *testing.T) {
	out := `goos: linux
pkg: github.com/fencekit/fencekit/test/bench/fencing
BenchmarkControlPlaneCost/idle-2 1 100 ns/op 269 apiserver-rss-MiB
BenchmarkControlPlaneCost/leases=100/replicas=2/impl=client-go-2 1 100 ns/op 32.0 leader-replica-rss-MiB 0 leaderships-lost
BenchmarkControlPlaneCost/leases=100/replicas=2/impl=client-go#01-2 1 100 ns/op 35.0 leader-replica-rss-MiB 0 leaderships-lost
BenchmarkControlPlaneCost/leases=100/replicas=2/impl=client-go#02-2 1 100 ns/op 31.0 leader-replica-rss-MiB 2 leaderships-lost
BenchmarkControlPlaneCost/leases=1000/replicas=2/impl=fencekit/qps=500-2 1 100 ns/op 57.5 leader-replica-rss-MiB 1000 leases-led
BenchmarkControlPlaneCost/leases=1000/replicas=2/impl=fencekit/qps=500-2 1 100 ns/op 60.5 leader-replica-rss-MiB 998 leases-led
PASS
`
	res, err := read(strings.NewReader(out), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]map[string]float64{
		"fencing/BenchmarkControlPlaneCost/idle":                                         {"apiserver-rss-MiB": 269, "ns/op": 100},
		"fencing/BenchmarkControlPlaneCost/leases=100/replicas=2/impl=client-go":         {"leader-replica-rss-MiB": 32, "leaderships-lost": 2, "ns/op": 100},
		"fencing/BenchmarkControlPlaneCost/leases=1000/replicas=2/impl=fencekit/qps=500": {"leader-replica-rss-MiB": 59, "leases-led": 998, "ns/op": 100},
	} {
		for unit, v := range want {
			if got, ok := res.Figures[name][unit]; !ok || got != v {
				t.Errorf("Figures[%q][%q] = %v (present %v), want %v", name, unit, got, ok, v)
			}
		}
	}
	if got := res.Samples["fencing/BenchmarkControlPlaneCost/leases=100/replicas=2/impl=client-go"]["leader-replica-rss-MiB"]; len(got) != 3 || got[0] != 32 || got[1] != 35 || got[2] != 31 {
		t.Errorf("samples of the client-go point = %v, want [32 35 31] in the order run", got)
	}
	if s, ok := res.Samples["fencing/BenchmarkControlPlaneCost/idle"]; ok {
		t.Errorf("a benchmark run once has samples %v, want none", s)
	}
	if len(res.Figures) != 3 {
		t.Errorf("figures of %d benchmarks, want 3: %v", len(res.Figures), res.Figures)
	}
}
