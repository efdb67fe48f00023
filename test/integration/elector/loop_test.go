package elector_test

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The tests of the elector's loop on a fake clock: the Lease, its compare-and-swap and its watch are the
// apiserver's, every timing decision reads the fake clock. The elector runs as the fencekit-elector user
// "alice", held to fencekit's Lease policy: every write it makes must present its epoch as field manager.

// t0 is where the fake clocks of the loop tests start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// timerClock is a fake clock that keeps the wake time of each timer set on it and not yet fired or
// stopped, so that a test steps the clock only once the elector sleeps until a given moment.
type timerClock struct {
	*clocktesting.FakeClock
	mu      sync.Mutex
	pending map[*trackedTimer]time.Time
}

func newTimerClock() *timerClock {
	return &timerClock{FakeClock: clocktesting.NewFakeClock(t0), pending: map[*trackedTimer]time.Time{}}
}

func (c *timerClock) NewTimer(d time.Duration) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &trackedTimer{Timer: c.FakeClock.NewTimer(d), c: c}
	c.pending[t] = c.Now().Add(d)
	return t
}

// Step moves the clock by d; the timers it fires are no longer pending.
func (c *timerClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.FakeClock.Step(d)
	now := c.Now()
	for t, at := range c.pending {
		if !at.After(now) {
			delete(c.pending, t)
		}
	}
}

// sleepsUntil reports whether a timer is set for at.
func (c *timerClock) sleepsUntil(at time.Time) bool {
	_, ok := c.sleepsWithin(at, at.Add(1))
	return ok
}

// sleepsWithin returns the earliest time in [from, to) a timer is set for.
func (c *timerClock) sleepsWithin(from, to time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, w := range c.pending {
		if !w.Before(from) && w.Before(to) && (first.IsZero() || w.Before(first)) {
			first = w
		}
	}
	return first, !first.IsZero()
}

type trackedTimer struct {
	clock.Timer
	c *timerClock
}

func (t *trackedTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	delete(t.c.pending, t)
	return t.Timer.Stop()
}

func (t *trackedTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.c.pending[t] = t.c.Now().Add(d)
	return t.Timer.Reset(d)
}

// loop is one elector "me" on the Lease "lock" of a namespace of its own, with the default timings on a
// fake clock, its metrics on a registry of its own; it posts its Events through its own client.
type loop struct {
	ns       string
	e        *elector.Elector
	clock    *timerClock
	cs       kubernetes.Interface // the elector's client, as "alice"
	reg      *prometheus.Registry
	started  chan elector.Token
	leadCtx  chan context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	sequence *sequence

	mu sync.Mutex
	// onWrite runs when the elector sends a Lease write (create or update), before the apiserver has it;
	// when it returns an error, the write fails with it and never reaches the apiserver, as through a
	// broken network path.
	onWrite func() error
}

// newLoop prepares a loop in a new namespace; start runs it.
func newLoop(t *testing.T) *loop {
	t.Helper()
	l := &loop{ns: env.Namespace(t), clock: newTimerClock(), reg: prometheus.NewRegistry(),
		started: make(chan elector.Token, 10), leadCtx: make(chan context.Context, 10),
		done: make(chan struct{}), sequence: &sequence{}}
	l.cs = electorClientset(t, l.ns, "alice", func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if (r.Method == http.MethodPost || r.Method == http.MethodPut) && strings.Contains(r.URL.Path, "/leases") {
				l.mu.Lock()
				hook := l.onWrite
				l.mu.Unlock()
				if hook != nil {
					if err := hook(); err != nil {
						return nil, err
					}
				}
			}
			return rt.RoundTrip(r)
		})
	})
	return l
}

// setOnWrite sets the hook run as each Lease write of the elector is in flight.
func (l *loop) setOnWrite(f func() error) {
	l.mu.Lock()
	l.onWrite = f
	l.mu.Unlock()
}

// seed creates, as an admin, the fenced Lease "lock" held by holder ("": none) with leaseDurationSeconds
// seconds at epoch. Its renewTime is far in the past by the wall clock: it must play no part.
func (l *loop) seed(t *testing.T, holder string, seconds int32, epoch string) {
	t.Helper()
	old := metav1.NewMicroTime(t0.Add(-24 * time.Hour))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "lock", Namespace: l.ns, Labels: map[string]string{protocol.FencedLabel: "true"},
			Annotations: map[string]string{protocol.EpochAnnotation: epoch}},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &seconds, RenewTime: &old},
	}
	if holder != "" {
		lease.Spec.HolderIdentity = &holder
	}
	if _, err := clientset(t).CoordinationV1().Leases(l.ns).Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Lease %s/lock: %v", l.ns, err)
	}
}

// start runs the elector, with mutate applied to its Config.
func (l *loop) start(t *testing.T, mutate func(*elector.Config)) {
	t.Helper()
	cfg := elector.Config{Client: l.cs, Namespace: l.ns, Name: "lock", Identity: "me",
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			l.started <- tok
			l.leadCtx <- ctx
			<-ctx.Done()
			l.sequence.add("OnStartedLeading returned")
		},
		OnStoppedLeading: func() { l.sequence.add("OnStoppedLeading") },
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := elector.New(cfg, elector.WithClock(l.clock), elector.WithMetricsRegisterer(l.reg))
	if err != nil {
		t.Fatal(err)
	}
	l.e = e
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() { defer close(l.done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-l.done })
}

// waitSleep waits until the elector has set its timer for until; only then is it safe to step the fake
// clock to that moment.
func (l *loop) waitSleep(t *testing.T, until time.Time) {
	t.Helper()
	eventually(t, testenv.EventuallyTimeout, "the elector to sleep until t0+"+until.Sub(t0).String(), func() bool {
		return l.clock.sleepsUntil(until)
	})
}

func (l *loop) waitStarted(t *testing.T) elector.Token {
	t.Helper()
	select {
	case tok := <-l.started:
		return tok
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatal("OnStartedLeading was not called")
		return elector.Token{}
	}
}

func (l *loop) lease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	return getLease(t, l.ns, "lock")
}

// metric is the value of the gauge or counter name in the loop's registry for the series labelled
// exactly want; 0 if there is no such series.
func (l *loop) metric(t *testing.T, name string, want prometheus.Labels) float64 {
	t.Helper()
	families, err := l.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := prometheus.Labels{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if !maps.Equal(got, want) {
				continue
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// ofLock is metric for the Lease lock.
func (l *loop) ofLock(t *testing.T, name string) float64 {
	t.Helper()
	return l.metric(t, name, prometheus.Labels{"lease": l.ns + "/lock"})
}

func (l *loop) lost(t *testing.T, reason string) float64 {
	t.Helper()
	return l.metric(t, "fencekit_elector_leadership_lost_total", prometheus.Labels{"lease": l.ns + "/lock", "reason": reason})
}

// sequence records the order of user-visible steps.
type sequence struct {
	mu    sync.Mutex
	steps []string
}

func (s *sequence) add(step string) { s.mu.Lock(); s.steps = append(s.steps, step); s.mu.Unlock() }
func (s *sequence) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.steps...)
}

func cmpSteps(want, got []string) string {
	if strings.Join(want, ", ") != strings.Join(got, ", ") {
		return "steps [" + strings.Join(got, ", ") + "], want [" + strings.Join(want, ", ") + "]"
	}
	return ""
}

// A standby takes over at its own observation time + leaseDurationSeconds (+ lock-delay), on its timer,
// whatever renewTime says; not a moment earlier.
func TestStandbyTakesOverAtExpiryFromObservation(t *testing.T) {
	for name, lockDelay := range map[string]time.Duration{"no lock-delay": 0, "lock-delay 5s": 5 * time.Second} {
		t.Run(name, func(t *testing.T) {
			l := newLoop(t)
			l.seed(t, "other", 15, "7")
			l.start(t, func(c *elector.Config) { c.LockDelay = lockDelay })
			// The standby observed the Lease at t0 (renewTime says a day ago) and sleeps on its timer.
			l.waitSleep(t, t0.Add(15*time.Second+lockDelay))
			l.clock.Step(15*time.Second + lockDelay - time.Millisecond)
			if got := holderOf(l.lease(t)); got != "other" {
				t.Fatalf("acquired %v after observation, before expiry", 15*time.Second+lockDelay-time.Millisecond)
			}
			l.clock.Step(time.Millisecond)
			tok := l.waitStarted(t)
			if tok.Epoch != 8 || tok.Holder != "me" {
				t.Errorf("token %v, want epoch 8 held by me", tok)
			}
			got := l.lease(t)
			if got.Annotations[protocol.EpochAnnotation] != "8" || got.Annotations[protocol.AcquirerAnnotation] != "alice" || got.Labels[protocol.FencedLabel] != "true" {
				t.Errorf("acquired Lease metadata: %v %v", got.Annotations, got.Labels)
			}
			if want := t0.Add(15*time.Second + lockDelay + 12850*time.Millisecond); !l.e.Deadline().Equal(want) {
				t.Errorf("Deadline() = t0 + %v, want t0 + %v", l.e.Deadline().Sub(t0), want.Sub(t0))
			}
		})
	}
}

// The safe-work deadline counts from when the acquire request was sent, not from when the reply came.
func TestDeadlineFromSendTime(t *testing.T) {
	l := newLoop(t)
	l.seed(t, "", 1, "3")
	var once sync.Once
	l.setOnWrite(func() error { once.Do(func() { l.clock.Step(time.Second) }); return nil }) // the acquisition reply takes 1s
	l.start(t, nil)
	if tok := l.waitStarted(t); tok.Epoch != 4 {
		t.Errorf("epoch %d, want 4", tok.Epoch)
	}
	// The clock reads t0+1s; the first renewal is due at t0+2s.
	if want := t0.Add(12850 * time.Millisecond); !l.e.Deadline().Equal(want) {
		t.Errorf("Deadline() = t0 + %v, want t0 + 12.85s (send time, not reply time t0+1s)", l.e.Deadline().Sub(t0))
	}
}

// Release: the leadership context ends and OnStartedLeading returns before the one write that clears the
// holder; OnStoppedLeading comes last. The epoch stays on the Lease.
func TestReleaseOrder(t *testing.T) {
	l := newLoop(t)
	l.start(t, nil)
	tok := l.waitStarted(t)
	l.setOnWrite(func() error { l.sequence.add("write"); return nil })
	l.cancel()
	<-l.done
	if diff := cmpSteps([]string{"OnStartedLeading returned", "write", "OnStoppedLeading"}, l.sequence.get()); diff != "" {
		t.Error(diff)
	}
	got := l.lease(t)
	if holderOf(got) != "" || got.Annotations[protocol.EpochAnnotation] != strconv.FormatInt(tok.Epoch, 10) {
		t.Errorf("released Lease: holder %q epoch %q", holderOf(got), got.Annotations[protocol.EpochAnnotation])
	}
}

// The Lease edited by hand to another epoch under the same holder: the leader steps down on the watch event
// and says why.
func TestHandEditedEpochStepsDown(t *testing.T) {
	l := newLoop(t)
	l.start(t, nil)
	tok := l.waitStarted(t)
	leadCtx := <-l.leadCtx
	edited := l.lease(t)
	edited.Annotations[protocol.EpochAnnotation] = strconv.FormatInt(tok.Epoch+10, 10)
	if _, err := clientset(t).CoordinationV1().Leases(l.ns).Update(t.Context(), edited, metav1.UpdateOptions{FieldManager: protocol.FieldManagerFor(tok.Epoch + 10)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leadCtx.Done():
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatal("the leader did not step down")
	}
	want := "elector: leadership lost: epoch_changed: the Lease now carries epoch \"" + strconv.FormatInt(tok.Epoch+10, 10) + "\", not " + strconv.FormatInt(tok.Epoch, 10)
	if got := context.Cause(leadCtx); got == nil || got.Error() != want {
		t.Errorf("cause %v, want %s", got, want)
	}
	eventually(t, testenv.EventuallyTimeout, "the loss to be counted", func() bool { return l.lost(t, "epoch_changed") == 1 })
	if l.e.IsLeader() {
		t.Error("IsLeader after stepping down")
	}
}

// Metrics (shared by every elector on a registry, told apart by the lease label) and Events on the Lease.
func TestMetricsAndEvents(t *testing.T) {
	l := newLoop(t)
	l.seed(t, "", 1, "41")
	l.start(t, nil)
	tok := l.waitStarted(t)
	if tok.Epoch != 42 {
		t.Fatalf("epoch %d", tok.Epoch)
	}
	for name, want := range map[string]float64{"is_leader": 1, "epoch": 42, "acquisitions_total": 1} {
		if got := l.ofLock(t, "fencekit_elector_"+name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// A second elector on the same registry shares the collectors: its leadership shows in them.
	otherLeads := make(chan struct{})
	other, err := elector.New(elector.Config{Client: l.cs, Namespace: l.ns, Name: "other", Identity: "x",
		OnStartedLeading: func(ctx context.Context, _ elector.Token) { close(otherLeads); <-ctx.Done() }},
		elector.WithMetricsRegisterer(l.reg))
	if err != nil {
		t.Fatalf("a second elector on the same registry: %v", err)
	}
	otherCtx, stopOther := context.WithCancel(t.Context())
	otherDone := make(chan error, 1)
	go func() { otherDone <- other.Run(otherCtx) }()
	select {
	case <-otherLeads:
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatal("the second elector did not lead Lease other")
	}
	if got := l.metric(t, "fencekit_elector_is_leader", prometheus.Labels{"lease": l.ns + "/other"}); got != 1 {
		t.Errorf("the second elector registered its own collectors: is_leader{lease=%q} = %v in the shared registry", l.ns+"/other", got)
	}
	stopOther()
	if err := <-otherDone; err != nil {
		t.Errorf("Run of the second elector: %v", err)
	}
	l.cancel()
	<-l.done
	if got := l.ofLock(t, "fencekit_elector_is_leader"); got != 0 {
		t.Errorf("is_leader after release = %v", got)
	}
	// The Events on the Lease, as the apiserver stores them once Run has returned: the elector's
	// broadcaster posts them through its own client, and the last Run on it waits until they were sent.
	want := []string{"Normal Acquired acquired at epoch 42 by me", "Normal Released me released epoch 42"}
	if diff := cmpSteps(want, leaseEvents(t, l.ns, "lock")); diff != "" {
		t.Error("the Events on Lease lock when Run returned: " + diff)
	}
	n, err := testutil.GatherAndCount(l.reg)
	if err != nil || n == 0 {
		t.Errorf("gathering the registry: %d series, %v", n, err)
	}
}

// leaseEvents are the events.k8s.io/v1 Events about the Lease ns/name, oldest first, as "type reason note".
func leaseEvents(t *testing.T, ns, name string) []string {
	t.Helper()
	list, err := clientset(t).EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing the Events of namespace %s: %v", ns, err)
	}
	list.Items = slices.DeleteFunc(list.Items, func(ev eventsv1.Event) bool {
		return ev.Regarding.Kind != "Lease" || ev.Regarding.Name != name
	})
	slices.SortStableFunc(list.Items, func(a, b eventsv1.Event) int { return a.EventTime.Compare(b.EventTime.Time) })
	var evs []string
	for _, ev := range list.Items {
		evs = append(evs, ev.Type+" "+ev.Reason+" "+ev.Note)
	}
	return evs
}

// A renewal the client holds back (its rate limiter's queue; here the clock moves 5 s while the request is
// in flight) schedules the next one RetryPeriod after its answer, not after its send, so renewals queued
// behind the client never fall due the moment they are answered; the safe-work deadline still counts from
// the send; the slow renewal is counted before any Lease is lost to it.
func TestRenewalScheduledFromTheAnswer(t *testing.T) {
	l := newLoop(t)
	l.start(t, nil)
	l.waitStarted(t)
	l.waitSleep(t, t0.Add(2*time.Second))
	var once sync.Once
	l.setOnWrite(func() error { once.Do(func() { l.clock.Step(5 * time.Second) }); return nil })
	l.clock.Step(2 * time.Second)
	// Sent at t0+2s, answered at t0+7s: the next renewal is due at t0+9s (from the send: t0+4s, past).
	l.waitSleep(t, t0.Add(9*time.Second))
	if want := t0.Add(2*time.Second + 12850*time.Millisecond); !l.e.Deadline().Equal(want) {
		t.Errorf("Deadline() = t0 + %v, want t0 + 14.85s (the renewal's send time + 12.85s)", l.e.Deadline().Sub(t0))
	}
	if got := l.metric(t, "fencekit_elector_slow_renewals_total", prometheus.Labels{}); got != 1 {
		t.Errorf("slow renewals %v, want 1 (5s from send to answer is more than half of renewDeadline - retryPeriod)", got)
	}
	l.setOnWrite(nil)
	l.clock.Step(2 * time.Second)
	l.waitSleep(t, t0.Add(11*time.Second))
	if got := l.metric(t, "fencekit_elector_slow_renewals_total", prometheus.Labels{}); got != 1 || !l.e.IsLeader() {
		t.Errorf("after a prompt renewal: slow renewals %v (want 1), leading %v (want true)", got, l.e.IsLeader())
	}
}
