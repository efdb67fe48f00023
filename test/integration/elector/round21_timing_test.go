//go:build openholes

package elector_test

// Round 21's probes that measure the real clock or load the machine (see round21_attack_test.go): they held
// at d399d8d and after its fixes; they run under -tags openholes, not in make test, which asserts no
// wall-clock timing.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound21DeadlineEndsOnTimeAfterRenewals: a leader renews for 3 s (the deadline timer is set again by each
// renewal, term.extend), then its renewals hang (the transport holds every Lease write until the request's
// context ends). Invariant: the leadership context ends no later than its safe-work deadline (as its
// Deadline() reports at the end) plus 100 ms, on the real clock; IsLeader is false then; a standby that
// takes over starts leading only after the old context ended; repeated 3 times.
func TestRound21DeadlineEndsOnTimeAfterRenewals(t *testing.T) {
	ns, h := parallelLock(t)
	var block atomic.Bool
	hang := func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if block.Load() && strings.Contains(r.URL.Path, "/leases") && (r.Method == http.MethodPut || r.Method == http.MethodPatch) {
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return rt.RoundTrip(r)
		})
	}
	type end struct {
		at, deadline time.Time
		epoch        int64
	}
	ends := make(chan end, 10)
	mk := func(id string) elector.Config {
		cfg := h.policyConfig(t, ns, id)
		cfg.Client = electorClientset(t, ns, id+"-user", hang)
		cfg.OnStartedLeading = func(ctx context.Context, tok elector.Token) {
			go func() {
				<-ctx.Done()
				at := time.Now()
				dl, _ := ctx.Deadline()
				ends <- end{at: at, deadline: dl, epoch: tok.Epoch}
			}()
			h.lead(ctx, tok)
		}
		return cfg
	}
	a := start(t, mk("a"))
	b := start(t, mk("b"))
	byID := map[string]*candidate{"a": a, "b": b}
	for round := range 3 {
		tok := h.wait(t, 20*time.Second)
		leader := byID[tok.Holder]
		time.Sleep(3 * time.Second)
		if !leader.e.IsLeader() {
			t.Fatalf("round %d: %s not leading after 3 s of renewals", round, tok.Holder)
		}
		block.Store(true)
		var e end
		select {
		case e = <-ends:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the leadership context of epoch %d did not end within 10 s of hung renewals", round, tok.Epoch)
		}
		late := e.at.Sub(e.deadline)
		t.Logf("round %d: epoch %d context ended %v after its deadline", round, e.epoch, late)
		if late > 100*time.Millisecond {
			t.Errorf("round %d: the leadership context of epoch %d ended %v after its safe-work deadline", round, e.epoch, late)
		}
		if leader.e.IsLeader() {
			t.Errorf("round %d: IsLeader true after the context ended", round)
		}
		// Let the other one take over: unblock writes for the standby only after the old term ended.
		block.Store(false)
	}
	h.check(t)
}

// TestRound21ForeignWritesTwoElectorsOneProcess: two electors of one process (one client: the shared watch
// hands both observers the informer's copy of each version) compete for one Lease while an admin writes
// other fields of the held Lease (an annotation, a label, a finalizer added and removed) as fast as it
// can, for 12 s: each foreign write races the holder's renewal, and the watch's copy becomes the renewal
// base (observer.watched, runner.checkObserved). Invariant: the holder never loses the Lease (no
// leadership_lost_total, a single epoch, one leadership), and no two leaderships overlap. Run with -race
// for shared-object mutation.
func TestRound21ForeignWritesTwoElectorsOneProcess(t *testing.T) {
	ns, h := parallelLock(t)
	cs := clientset(t)
	reg := prometheus.NewRegistry()
	var stopped atomic.Int64
	mk := func(id string) elector.Config {
		cfg := h.config(t, ns, id)
		cfg.Client = cs
		cfg.OnStoppedLeading = func() { stopped.Add(1) }
		return cfg
	}
	start(t, mk("a"), elector.WithMetricsRegisterer(reg))
	start(t, mk("b"), elector.WithMetricsRegisterer(reg))
	tok := h.wait(t, 20*time.Second)
	admin := clientset(t).CoordinationV1().Leases(ns)
	ctx, cancel := context.WithTimeout(t.Context(), 12*time.Second)
	defer cancel()
	var writes, conflicts atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				var err error
				switch (i + w) % 4 {
				case 0:
					p := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/w%d":"%d"}}}`, w, i)
					_, err = admin.Patch(ctx, "lock", types.MergePatchType, []byte(p), metav1.PatchOptions{})
				case 1:
					l := getLeaseOrNil(ctx, admin)
					if l == nil {
						continue
					}
					if l.Labels == nil {
						l.Labels = map[string]string{}
					}
					l.Labels[fmt.Sprintf("example.com/w%d", w)] = fmt.Sprint(i)
					_, err = admin.Update(ctx, l, metav1.UpdateOptions{})
				case 2:
					p := fmt.Sprintf(`{"metadata":{"finalizers":["example.com/f%d"]}}`, w)
					_, err = admin.Patch(ctx, "lock", types.MergePatchType, []byte(p), metav1.PatchOptions{})
				case 3:
					_, err = admin.Patch(ctx, "lock", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				}
				if err == nil {
					writes.Add(1)
				} else if ctx.Err() == nil {
					conflicts.Add(1)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d foreign writes (%d refused) while %s led epoch %d", writes.Load(), conflicts.Load(), tok.Holder, tok.Epoch)
	l := getLease(t, ns, "lock")
	if holderOf(l) != tok.Holder {
		t.Errorf("the Lease names %q, not the leader %s", holderOf(l), tok.Holder)
	}
	h.mu.Lock()
	order := append([]int64(nil), h.order...)
	h.mu.Unlock()
	if len(order) != 1 {
		t.Errorf("leaderships during the foreign writes: epochs %v (want only %d)", order, tok.Epoch)
	}
	if n := stopped.Load(); n != 0 {
		t.Errorf("%d leaderships stopped during the foreign writes", n)
	}
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "fencekit_elector_leadership_lost_total" {
			for _, m := range mf.GetMetric() {
				t.Errorf("leadership lost: %v = %v", m.GetLabel(), m.GetCounter().GetValue())
			}
		}
		if mf.GetName() == "fencekit_elector_is_leader" {
			for _, m := range mf.GetMetric() {
				if v := m.GetGauge().GetValue(); v != 1 {
					t.Errorf("is_leader = %v while one elector of the process leads", v)
				}
			}
		}
	}
	h.check(t)
}

// TestRound21EventsAfterMassAcquisition600: TestRound21EventsAfterMassAcquisition with 600 Leases (1,200
// Events, posted while Run ends: at d399d8d the 600 Acquired Events were still paced then).
func TestRound21EventsAfterMassAcquisition600(t *testing.T) { round21Mass(t, 600) }

// round21Sink is a logr sink that discards everything, and blocks the caller of an Info whose message
// starts with prefix while gate is closed (non-nil).
type round21Sink struct {
	prefix string
	gate   *atomic.Pointer[chan struct{}]
	hits   *atomic.Int64
}

func (s round21Sink) Init(logr.RuntimeInfo)          {}
func (s round21Sink) Enabled(int) bool               { return true }
func (s round21Sink) Error(error, string, ...any)    {}
func (s round21Sink) WithValues(...any) logr.LogSink { return s }
func (s round21Sink) WithName(string) logr.LogSink   { return s }
func (s round21Sink) Info(_ int, msg string, _ ...any) {
	if strings.HasPrefix(msg, s.prefix) {
		s.hits.Add(1)
		if ch := s.gate.Load(); ch != nil {
			<-*ch
		}
	}
}

// TestRound21StalledLoopDeadlineTimer: the leader renews for 2 s on the real clock (its deadline timer is
// set again by each renewal), then one renewal is answered slowly (700 ms, a "slow renewal"), and the loop
// stalls in the log call that reports it (a logger blocked on its output), before that renewal extends
// the deadline: from then on only the deadline timer can end the leadership context. A standby of another
// process takes over at expiry. Invariant: the leadership context ends no later than its safe-work
// deadline plus 100 ms; the standby starts leading only after it ended.
func TestRound21StalledLoopDeadlineTimer(t *testing.T) {
	ns, h := parallelLock(t)
	var slow atomic.Bool
	delay := func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if slow.Load() && strings.Contains(r.URL.Path, "/leases") && r.Method == http.MethodPut {
				time.Sleep(700 * time.Millisecond)
			}
			return resp, err
		})
	}
	type end struct{ at, deadline time.Time }
	ends := make(chan end, 4)
	var gate atomic.Pointer[chan struct{}]
	var hits atomic.Int64
	cfg := h.policyConfig(t, ns, "a")
	cfg.Client = electorClientset(t, ns, "a-user", delay)
	cfg.OnStartedLeading = func(ctx context.Context, tok elector.Token) {
		go func() {
			<-ctx.Done()
			at := time.Now()
			dl, _ := ctx.Deadline()
			ends <- end{at: at, deadline: dl}
		}()
		h.lead(ctx, tok)
	}
	a := start(t, cfg, elector.WithLogger(logr.New(round21Sink{prefix: "Renewals are slow", gate: &gate, hits: &hits})))
	tok := h.wait(t, 20*time.Second)
	if tok.Holder != "a" {
		t.Fatalf("leader %s", tok.Holder)
	}
	time.Sleep(2 * time.Second)
	open := make(chan struct{})
	gate.Store(&open)
	defer close(open)
	slow.Store(true)
	start(t, h.policyConfig(t, ns, "b"))
	var e end
	select {
	case e = <-ends:
	case <-time.After(10 * time.Second):
		t.Fatalf("the leadership context did not end within 10 s of a stalled loop (slow-renewal logs: %d)", hits.Load())
	}
	late := e.at.Sub(e.deadline)
	t.Logf("the leadership context ended %v after its deadline (slow-renewal logs: %d)", late, hits.Load())
	if late > 100*time.Millisecond {
		t.Errorf("the leadership context ended %v after its safe-work deadline", late)
	}
	if a.e.IsLeader() {
		t.Errorf("IsLeader true after the deadline")
	}
	tb := h.wait(t, 10*time.Second)
	t.Logf("b leads epoch %d", tb.Epoch)
	h.check(t)
}

func getLeaseOrNil(ctx context.Context, leases interface {
	Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
}) *coordinationv1.Lease {
	l, err := leases.Get(ctx, "lock", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}
