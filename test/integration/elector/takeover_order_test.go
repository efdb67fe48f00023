package elector_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound21IsLeaderAcrossTakeovers: two electors of one process on one registry and one Lease; an admin
// deletes the Lease five times (the holder steps down, one of the two acquires again). Invariant: is_leader
// for the Lease is always 0 or 1 when sampled, is 1 while one leads, and 0 once both Runs returned, and the
// two leaderships never overlap: each learns of the deletion from its watch, the holder steps down on its
// own goroutine while the other creates the Lease, and the other starts leading only once the holder's
// leadership has ended (the process's leaderships of a Lease are ordered: pkg/elector/leading.go).
func TestRound21IsLeaderAcrossTakeovers(t *testing.T) {
	ns, h := parallelLock(t)
	reg := prometheus.NewRegistry()
	a := start(t, h.config(t, ns, "a"), elector.WithMetricsRegisterer(reg))
	b := start(t, h.config(t, ns, "b"), elector.WithMetricsRegisterer(reg))
	lease := ns + "/lock"
	var bad atomic.Value
	sctx, scancel := context.WithCancel(t.Context())
	var swg sync.WaitGroup
	swg.Go(func() {
		for sctx.Err() == nil {
			if v := leaseGauge(reg, "fencekit_elector_is_leader", lease); v != -999 && (v < 0 || v > 1) {
				bad.CompareAndSwap(nil, v)
			}
			time.Sleep(time.Millisecond)
		}
	})
	for i := range 5 {
		tok := h.wait(t, 20*time.Second)
		time.Sleep(500 * time.Millisecond)
		if v := leaseGauge(reg, "fencekit_elector_is_leader", lease); v != 1 {
			t.Errorf("takeover %d: is_leader = %v while %s leads epoch %d", i, v, tok.Holder, tok.Epoch)
		}
		deleteLease(t, ns)
	}
	h.wait(t, 20*time.Second)
	scancel()
	swg.Wait()
	a.stop()
	b.stop()
	if v := bad.Load(); v != nil {
		t.Errorf("is_leader sampled at %v", v)
	}
	if v := leaseGauge(reg, "fencekit_elector_is_leader", lease); v != 0 {
		t.Errorf("is_leader = %v once both Runs returned", v)
	}
	h.check(t)
}

// leaseGauge reads metric name{lease=lease} from reg, a gauge's or a counter's value (-999 if absent or
// unreadable). It calls no t method: the tests sample it from goroutines of their own.
func leaseGauge(reg *prometheus.Registry, name, lease string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -999
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "lease" && lp.GetValue() == lease {
					switch {
					case m.GetGauge() != nil:
						return m.GetGauge().GetValue()
					case m.GetCounter() != nil:
						return m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return -999
}

// A holder whose OnStartedLeading returns a second after its leadership context ended (its cleanup) and
// an elector of the same process on another client of the same apiserver: an admin deletes the Lease
// twice. The other elector acquires the Lease as soon as its watch shows the deletion, but starts leading
// only once the holder's OnStartedLeading has returned: the two never run at once.
func TestALeadersCleanupDelaysTheNextLeaderOfItsProcess(t *testing.T) {
	ns, _ := parallelLock(t)
	var mu sync.Mutex
	leading := map[string]bool{}
	overlaps := 0
	started := make(chan elector.Token, 10)
	lead := func(ctx context.Context, tok elector.Token) {
		mu.Lock()
		for id, on := range leading {
			if on && id != tok.Holder {
				overlaps++
				t.Errorf("%s started leading at epoch %d while %s's OnStartedLeading still ran", tok.Holder, tok.Epoch, id)
			}
		}
		leading[tok.Holder] = true
		mu.Unlock()
		started <- tok
		<-ctx.Done()
		time.Sleep(time.Second) // the cleanup, after the leadership context ended
		mu.Lock()
		leading[tok.Holder] = false
		mu.Unlock()
	}
	for _, id := range []string{"a", "b"} {
		cfg := shortConfig(t, ns, "lock", id)
		cfg.OnStartedLeading = lead
		start(t, cfg)
	}
	next := func() elector.Token {
		select {
		case tok := <-started:
			return tok
		case <-time.After(testenv.EventuallyTimeout):
			t.Fatal("no elector started leading")
			return elector.Token{}
		}
	}
	tok := next()
	for range 2 {
		deleteLease(t, ns)
		after := next()
		if after.Epoch <= tok.Epoch {
			t.Errorf("epoch %d led after epoch %d", after.Epoch, tok.Epoch)
		}
		tok = after
	}
	mu.Lock()
	defer mu.Unlock()
	if overlaps != 0 {
		t.Errorf("%d overlapping leaderships in one process", overlaps)
	}
}
