package elector_test

// Round 21 of the independent attacker, against d399d8d (the loop split into step and sleep, answers without
// managedFields, the watch's copy of the elector's own write taken as the renewal base, the deadline timer
// set again by each renewal, paced Events, per-Lease series made at scrape time). Each test asserts the
// invariant it tries to break. Three worked at d399d8d. Two are closed (decision 0061):
// TestRound21FakeClockDeadlineTimerAfterItFired (the fake clock's Step blocked for ever once term.extend
// Reset the deadline timer that had run: a timer that ran is replaced, never Reset) and
// TestRound21EventsAfterMassAcquisition600 (paced Events were still queued when Run ended and lost; the
// pacing was withdrawn). TestRound21FencedLabelRemovedByAdmin (break glass removes the fenced label and the
// holder steps down) is decided by decision 0072: the removal ends the term, whose epoch no policy guards
// any more, and its holder releases the Lease and acquires a new epoch at once
// (TestFencedLabelRemovedFromAHeldLease, in make test). The timing probes and the 600-elector attempt run
// under -tags openholes (round21_timing_test.go). TestRound21IsLeaderAcrossTakeovers, open since decision
// 0068, is closed by decision 0070 (takeover_order_test.go).

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound21EventsAfterMassAcquisition: 150 electors on one client (one event broadcaster) each acquire a
// Lease of their own; Run ends for all of them the moment the last one leads. Invariant: once every Run
// returned, each Lease has its Acquired and its Released Event stored in the apiserver.
func TestRound21EventsAfterMassAcquisition(t *testing.T) { round21Mass(t, 150) }

func round21Mass(t *testing.T, n int) {
	t.Parallel()
	ns := env.Namespace(t)
	cs := clientset(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var leading atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		e, err := elector.New(elector.Config{Client: cs, Namespace: ns, Name: fmt.Sprintf("mass-%d", i), Identity: "me",
			LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			OnStartedLeading: func(ctx context.Context, _ elector.Token) { leading.Add(1); <-ctx.Done() }},
			elector.WithMetricsRegisterer(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = e.Run(ctx) })
	}
	began := time.Now()
	for leading.Load() != int64(n) {
		if time.Since(began) > 40*time.Second {
			t.Fatalf("%d of %d electors lead after 40 s", leading.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("all %d lead after %v", n, time.Since(began))
	t0 := time.Now()
	cancel()
	wg.Wait()
	t.Logf("every Run returned %v after the last acquisition", time.Since(t0))
	list, err := cs.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]bool{}
	for _, ev := range list.Items {
		if got[ev.Regarding.Name] == nil {
			got[ev.Regarding.Name] = map[string]bool{}
		}
		got[ev.Regarding.Name][ev.Reason] = true
	}
	var missAcq, missRel int
	for i := range n {
		name := fmt.Sprintf("mass-%d", i)
		if !got[name]["Acquired"] {
			missAcq++
		}
		if !got[name]["Released"] {
			missRel++
		}
	}
	t.Logf("%d Events stored for %d Leases", len(list.Items), n)
	if missAcq+missRel > 0 {
		t.Errorf("once every Run returned, %d Leases have no Acquired Event and %d no Released Event (of %d)", missAcq, missRel, n)
	}
}

// TestRound21FakeClockDeadlineTimerAfterItFired: an elector on a fake clock (elector.WithClock, the
// package's tests' clocktesting.FakeClock). While its renewal is in flight the clock moves past the
// safe-work deadline (the deadline timer runs: the leadership context ends), then the renewal is answered
// and extends the term (at d399d8d term.extend Reset the timer that had already run). Invariant: the elector keeps
// working on that clock: the next Step of the clock returns, and the elector leads again.
func TestRound21FakeClockDeadlineTimerAfterItFired(t *testing.T) {
	l := newLoop(t)
	leadCtx := make(chan context.Context, 4)
	cfg := elector.Config{Client: l.cs, Namespace: l.ns, Name: "lock", Identity: "me",
		OnStartedLeading: func(ctx context.Context, _ elector.Token) { leadCtx <- ctx; <-ctx.Done() }}
	e, err := elector.New(cfg, elector.WithClock(l.clock), elector.WithMetricsRegisterer(l.reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // no wait for Run: it may be stuck on the clock
	go func() { _ = e.Run(ctx) }()
	var lctx context.Context
	select {
	case lctx = <-leadCtx:
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatal("not leading")
	}
	l.waitSleep(t, t0.Add(2*time.Second))
	var once sync.Once
	l.setOnWrite(func() error { once.Do(func() { l.clock.Step(20 * time.Second) }); return nil })
	l.clock.Step(2 * time.Second)
	select {
	case <-lctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the leadership context did not end though the clock passed its deadline")
	}
	// The renewal was answered; the elector steps down and sleeps until it may compete again.
	eventually(t, testenv.EventuallyTimeout, "the elector to sleep past t0+22s", func() bool {
		_, ok := l.clock.sleepsWithin(t0.Add(22*time.Second+1), t0.Add(time.Hour))
		return ok
	})
	l.setOnWrite(nil)
	stepped := make(chan struct{})
	go func() { l.clock.Step(time.Second); close(stepped) }()
	select {
	case <-stepped:
	case <-time.After(5 * time.Second):
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "setTimeLocked") {
				t.Logf("the goroutine stepping the clock:\n%s", g)
			}
		}
		t.Fatal("FakeClock.Step(1s) did not return within 5 s: the clock is stuck after the term's deadline timer was set again once it had run")
	}
	go func() { l.clock.Step(time.Minute) }()
	select {
	case <-leadCtx:
	case <-time.After(10 * time.Second):
		t.Error("the elector did not lead again after the clock moved a minute")
	}
}

// TestRound21FencedLabelRemovedByIntruder: the fenced label's removal (TestFencedLabelRemovedFromAHeldLease,
// by break glass) tried by a user held to the Lease policy (user "intruder", every verb on Leases of the
// namespace): the removal is refused (held), or the holder must keep the Lease.
func TestRound21FencedLabelRemovedByIntruder(t *testing.T) {
	ns, h := parallelLock(t)
	var stopped atomic.Int64
	cfg := h.config(t, ns, "a")
	cfg.OnStoppedLeading = func() { stopped.Add(1) }
	start(t, cfg)
	tok := h.wait(t, 20*time.Second)
	intruder := round20Intruder(t, ns).CoordinationV1().Leases(ns)
	for _, p := range []string{
		`[{"op":"remove","path":"/metadata/labels/` + strings.ReplaceAll(protocol.FencedLabel, "/", "~1") + `"}]`,
		`[{"op":"replace","path":"/metadata/labels/` + strings.ReplaceAll(protocol.FencedLabel, "/", "~1") + `","value":"false"}]`,
	} {
		_, err := intruder.Patch(t.Context(), "lock", types.JSONPatchType, []byte(p), metav1.PatchOptions{})
		t.Logf("intruder patch %s: %v", p, err)
	}
	time.Sleep(2 * time.Second)
	if n := stopped.Load(); n != 0 {
		t.Errorf("the intruder's label write made %s lose epoch %d", tok.Holder, tok.Epoch)
	}
	h.check(t)
}
