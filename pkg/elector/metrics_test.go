package elector

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The electors of one registerer share the per-Lease series: each Lease acquired has its is_leader (how
// many of the process's electors lead it), the epoch of its last acquisition and its acquisitions, and a
// Lease never acquired has none.
func TestLeaseSeriesOfOneRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newMetrics(reg)
	if err != nil {
		t.Fatalf("a second elector on the registerer: %v", err)
	}
	a.leases.acquired("ns/orders", 3)
	a.leases.leading("ns/orders", 1)
	a.leases.leading("ns/orders", -1)
	b.leases.acquired("ns/orders", 4)
	b.leases.leading("ns/orders", 1)
	b.leases.acquired("ns/billing", 9)
	b.leases.leading("ns/never-acquired", 1)

	want := `
# HELP fencekit_elector_acquisitions_total Acquisitions of the Lease by this process.
# TYPE fencekit_elector_acquisitions_total counter
fencekit_elector_acquisitions_total{lease="ns/billing"} 1
fencekit_elector_acquisitions_total{lease="ns/orders"} 2
# HELP fencekit_elector_epoch The fencing epoch of the last acquisition of the Lease by this process.
# TYPE fencekit_elector_epoch gauge
fencekit_elector_epoch{lease="ns/billing"} 9
fencekit_elector_epoch{lease="ns/orders"} 4
# HELP fencekit_elector_is_leader Number of electors in this process leading the Lease (1 while leading, 0 otherwise).
# TYPE fencekit_elector_is_leader gauge
fencekit_elector_is_leader{lease="ns/billing"} 0
fencekit_elector_is_leader{lease="ns/orders"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"fencekit_elector_acquisitions_total", "fencekit_elector_epoch", "fencekit_elector_is_leader"); err != nil {
		t.Error(err)
	}
}
