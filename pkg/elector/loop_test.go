package elector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
)

// t0 is where the fake clocks of the package's tests start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// lease is the fenced Lease ns/lock at resourceVersion 500, held by holder ("-": no holder at all), with
// leaseDurationSeconds seconds (nil: none) and annotations.
func lease(holder string, seconds *int32, annotations map[string]string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock", Namespace: "ns", ResourceVersion: "500", Annotations: annotations,
		Labels: map[string]string{FencedLabel: "true"}}}
	if holder != "-" {
		l.Spec.HolderIdentity = &holder
	}
	l.Spec.LeaseDurationSeconds = seconds
	// renewTime is far in the past by the wall clock: it must play no part.
	old := metav1.NewMicroTime(t0.Add(-24 * time.Hour))
	l.Spec.RenewTime = &old
	return l
}

func i32(v int32) *int32 { return &v }

// waitFor polls a condition that depends only on goroutine scheduling (never on time passing). This
// in-package test cannot use internal/testenv's poller (testenv imports pkg/elector), so it calls the
// same wait.PollUntilContextTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

var leasesGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// fakeAPI gives client-go's fake clientset what the elector relies on: integer resourceVersions and
// compare-and-swap updates. Hooks let a test fail requests or move the fake clock while a request is "in
// flight".
type fakeAPI struct {
	cs *fake.Clientset

	mu       sync.Mutex
	rv       int64
	writes   []*coordinationv1.Lease // every successful write, in order
	attempts int                     // update attempts
	failWith error                   // non-nil: every update fails
	onWrite  func()                  // runs before each write is applied
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{cs: fake.NewClientset(), rv: 1000}
	f.cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: "alice"}}}, nil
	})
	f.cs.PrependReactor("create", "leases", f.write(false))
	f.cs.PrependReactor("update", "leases", f.write(true))
	return f
}

func (f *fakeAPI) write(update bool) k8stesting.ReactionFunc {
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		hook := f.onWrite
		f.mu.Unlock()
		if hook != nil {
			hook()
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		// As fencekit's Lease policy does: every write presents the epoch it writes at.
		fm := ""
		switch a := a.(type) {
		case k8stesting.CreateActionImpl:
			fm = a.CreateOptions.FieldManager
		case k8stesting.UpdateActionImpl:
			fm = a.UpdateOptions.FieldManager
		}
		if want := FieldManagerPrefix + l.Annotations[EpochAnnotation]; fm != want {
			return true, nil, apierrors.NewForbidden(leasesGVR.GroupResource(), l.Name, fmt.Errorf("send fieldManager %s, not %q", want, fm))
		}
		tracker := f.cs.Tracker()
		if update {
			f.attempts++
			if f.failWith != nil {
				return true, nil, f.failWith
			}
			cur, err := tracker.Get(leasesGVR, l.Namespace, l.Name)
			if err != nil {
				return true, nil, err
			}
			if cur.(*coordinationv1.Lease).ResourceVersion != l.ResourceVersion {
				return true, nil, apierrors.NewConflict(leasesGVR.GroupResource(), l.Name, errors.New("resourceVersion mismatch"))
			}
		}
		f.rv++
		l.ResourceVersion = strconv.FormatInt(f.rv, 10)
		var err error
		if update {
			err = tracker.Update(leasesGVR, l, l.Namespace)
		} else {
			err = tracker.Create(leasesGVR, l, l.Namespace)
		}
		if err != nil {
			return true, nil, err
		}
		f.writes = append(f.writes, l.DeepCopy())
		return true, l, nil
	}
}

func (f *fakeAPI) seed(t *testing.T, l *coordinationv1.Lease) {
	t.Helper()
	f.mu.Lock()
	f.rv++
	l.ResourceVersion = strconv.FormatInt(f.rv, 10)
	f.mu.Unlock()
	if err := f.cs.Tracker().Create(leasesGVR, l, l.Namespace); err != nil {
		t.Fatal(err)
	}
}

func (f *fakeAPI) current(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := f.cs.CoordinationV1().Leases("ns").Get(context.Background(), "lock", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (f *fakeAPI) numWrites() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.writes)
}

func (f *fakeAPI) numAttempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

type harness struct {
	e        *Elector
	fc       *clocktesting.FakeClock
	api      *fakeAPI
	reg      *prometheus.Registry
	started  chan Token
	leadCtx  chan context.Context
	stopped  chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	sequence *sequence
	rec      *events.FakeRecorder
	jitter   float64      // what the elector's jitter source returns
	wake     atomic.Int64 // when the loop last went to sleep until (unix nanoseconds of the fake clock)
	// writesAtSleep is how many Lease writes the fake API had taken when the loop last went to sleep: a
	// sleep recorded before a write may have the same wake time as the one after it.
	writesAtSleep atomic.Int64
}

// waitSleep waits until the loop has set its timer for until and sleeps; only then is it safe to step the
// fake clock to that moment.
func (h *harness) waitSleep(t *testing.T, until time.Time) {
	t.Helper()
	waitFor(t, "the loop to sleep until t0+"+until.Sub(t0).String(), func() bool { return h.wake.Load() == until.UnixNano() })
}

// waitSleepAfterWrites waits until the loop went to sleep until a time after the fake API took at least
// writes Lease writes. A leader waiting for PostAcquire sleeps until its next renewal, which can be the
// very time it sleeps until after releasing: without the write count, stepping the clock could race the
// loop's new timer, which would then fire a step too late.
func (h *harness) waitSleepAfterWrites(t *testing.T, until time.Time, writes int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the loop to sleep until t0+%v after %d writes", until.Sub(t0), writes), func() bool {
		return h.wake.Load() == until.UnixNano() && h.writesAtSleep.Load() >= int64(writes)
	})
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

func startHarness(t *testing.T, api *fakeAPI, mutate func(*Config)) *harness {
	return startHarnessWithClock(t, api, clocktesting.NewFakeClock(t0), mutate)
}

func startHarnessWithClock(t *testing.T, api *fakeAPI, fc *clocktesting.FakeClock, mutate func(*Config), jitter ...float64) *harness {
	t.Helper()
	h := &harness{fc: fc, api: api, reg: prometheus.NewRegistry(),
		started: make(chan Token, 10), leadCtx: make(chan context.Context, 10), stopped: make(chan struct{}, 10),
		done: make(chan struct{}), sequence: &sequence{}}
	cfg := Config{Client: api.cs, Namespace: "ns", Name: "lock", Identity: "me",
		OnStartedLeading: func(ctx context.Context, tok Token) {
			h.started <- tok
			h.leadCtx <- ctx
			<-ctx.Done()
			h.sequence.add("OnStartedLeading returned")
		},
		OnStoppedLeading: func() { h.sequence.add("OnStoppedLeading"); h.stopped <- struct{}{} },
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if len(jitter) > 0 {
		h.jitter = jitter[0]
	}
	h.rec = events.NewFakeRecorder(100)
	e, err := New(cfg, WithClock(h.fc), WithMetricsRegisterer(h.reg), WithEventRecorder(h.rec))
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	e.sleepHook = func(wake time.Time) {
		h.writesAtSleep.Store(int64(api.numWrites()))
		h.wake.Store(wake.UnixNano())
	}
	e.rand = func() float64 { return h.jitter } // deterministic retry pauses
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { defer close(h.done); _ = e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-h.done })
	return h
}

func (h *harness) waitStarted(t *testing.T) Token {
	t.Helper()
	select {
	case tok := <-h.started:
		return tok
	case <-time.After(10 * time.Second):
		t.Fatal("OnStartedLeading was not called")
		return Token{}
	}
}

func (h *harness) lost(reason string) float64 {
	return testutil.ToFloat64(h.e.metrics.lost.WithLabelValues("ns/lock", reason))
}

// A standby takes over at its own observation time + leaseDurationSeconds (+ lock-delay), on its timer,
// whatever renewTime says; not a moment earlier.
func TestStandbyTakesOverAtExpiryFromObservation(t *testing.T) {
	for name, lockDelay := range map[string]time.Duration{"no lock-delay": 0, "lock-delay 5s": 5 * time.Second} {
		t.Run(name, func(t *testing.T) {
			api := newFakeAPI(t)
			l := lease("other", i32(15), map[string]string{EpochAnnotation: "7"})
			api.seed(t, l)
			h := startHarness(t, api, func(c *Config) { c.LockDelay = lockDelay })
			// The standby observed the Lease at t0 (renewTime says a day ago) and sleeps on its timer.
			h.waitSleep(t, t0.Add(15*time.Second+lockDelay))
			h.fc.Step(15*time.Second + lockDelay - time.Millisecond)
			if got := holder(api.current(t)); got != "other" {
				t.Fatalf("acquired %v after observation, before expiry", 15*time.Second+lockDelay-time.Millisecond)
			}
			h.fc.Step(time.Millisecond)
			tok := h.waitStarted(t)
			if tok.Epoch != 8 || tok.Holder != "me" {
				t.Errorf("token %v, want epoch 8 held by me", tok)
			}
			got := api.current(t)
			if got.Annotations[EpochAnnotation] != "8" || got.Annotations[AcquirerAnnotation] != "alice" || got.Labels[FencedLabel] != "true" {
				t.Errorf("acquired Lease metadata: %v %v", got.Annotations, got.Labels)
			}
			if want := t0.Add(15*time.Second + lockDelay + 12850*time.Millisecond); !h.e.Deadline().Equal(want) {
				t.Errorf("Deadline() = t0 + %v, want t0 + %v", h.e.Deadline().Sub(t0), want.Sub(t0))
			}
		})
	}
}

// The safe-work deadline counts from when the acquire request was sent, not from when the reply came.
func TestDeadlineFromSendTime(t *testing.T) {
	api := newFakeAPI(t)
	api.seed(t, lease("", i32(1), map[string]string{EpochAnnotation: "3"}))
	fc := clocktesting.NewFakeClock(t0)
	var once sync.Once
	api.onWrite = func() { once.Do(func() { fc.Step(time.Second) }) } // the acquisition reply takes 1s
	h := startHarnessWithClock(t, api, fc, nil)
	if tok := h.waitStarted(t); tok.Epoch != 4 {
		t.Errorf("epoch %d, want 4", tok.Epoch)
	}
	// The clock reads t0+1s; the first renewal is due at t0+2s.
	if want := t0.Add(12850 * time.Millisecond); !h.e.Deadline().Equal(want) {
		t.Errorf("Deadline() = t0 + %v, want t0 + 12.85s (send time, not reply time t0+1s)", h.e.Deadline().Sub(t0))
	}
}

// The leader steps down when RenewDeadline has passed since its last successful renewal was sent, and
// never reports leadership past the safe-work deadline.
func TestRenewDeadlineStepDown(t *testing.T) {
	api := newFakeAPI(t)
	h := startHarness(t, api, nil)
	tok := h.waitStarted(t)
	leadCtx := <-h.leadCtx
	if tok.Epoch < 1 {
		t.Fatalf("epoch %d", tok.Epoch)
	}
	api.mu.Lock()
	api.failWith = apierrors.NewServiceUnavailable("the apiserver is unreachable")
	api.mu.Unlock()
	// Renewals at t0+2s, 4s, 6s, 8s fail; at t0+10s the leader steps down.
	for i := 1; i <= 4; i++ {
		h.waitSleep(t, t0.Add(time.Duration(2*i)*time.Second))
		h.fc.Step(2 * time.Second)
		waitFor(t, "renewal attempt "+strconv.Itoa(i), func() bool { return api.numAttempts() >= i })
		if !h.e.IsLeader() {
			t.Fatalf("stepped down at t0+%ds, before the renew deadline", 2*i)
		}
	}
	h.waitSleep(t, t0.Add(10*time.Second)) // the step-down time, not another renewal
	h.fc.Step(2 * time.Second)
	if h.e.IsLeader() {
		// t0+10s is still before the safe-work deadline (t0+12.85s): IsLeader turns false once the loop runs.
		waitFor(t, "the step-down", func() bool { return !h.e.IsLeader() })
	}
	select {
	case <-h.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("OnStoppedLeading was not called")
	}
	if !errors.Is(context.Cause(leadCtx), ErrLeadershipLost) {
		t.Errorf("cause %v", context.Cause(leadCtx))
	}
	if got := h.lost(reasonRenewDeadline); got != 1 {
		t.Errorf("leadership_lost_total{reason=renew_deadline} = %v", got)
	}
	if got := api.numAttempts(); got != 4 {
		t.Errorf("%d renewal attempts, want 4 (one per retry period)", got)
	}
	if !h.e.Token().IsZero() || !h.e.Deadline().IsZero() {
		t.Errorf("after stepping down: Token %v, Deadline %v", h.e.Token(), h.e.Deadline())
	}
}

// Release: the leadership context ends and OnStartedLeading returns before the one write that clears the
// holder; OnStoppedLeading comes last. The epoch stays on the Lease.
func TestReleaseOrder(t *testing.T) {
	api := newFakeAPI(t)
	h := startHarness(t, api, nil)
	tok := h.waitStarted(t)
	api.mu.Lock()
	api.onWrite = func() { h.sequence.add("write") }
	api.mu.Unlock()
	h.cancel()
	<-h.done
	if diff := cmpSteps([]string{"OnStartedLeading returned", "write", "OnStoppedLeading"}, h.sequence.get()); diff != "" {
		t.Error(diff)
	}
	l := api.current(t)
	if holder(l) != "" || l.Annotations[EpochAnnotation] != strconv.FormatInt(tok.Epoch, 10) {
		t.Errorf("released Lease: holder %q epoch %q", holder(l), l.Annotations[EpochAnnotation])
	}
}

func cmpSteps(want, got []string) string {
	if strings.Join(want, ", ") != strings.Join(got, ", ") {
		return "steps [" + strings.Join(got, ", ") + "], want [" + strings.Join(want, ", ") + "]"
	}
	return ""
}

// A failing PostAcquire: leadership is not reported, the Lease is released, the loss is counted, and the
// elector competes again after RetryPeriod, at the next epoch.
func TestPostAcquireFailure(t *testing.T) {
	api := newFakeAPI(t)
	var calls sync.Map
	var n int
	var mu sync.Mutex
	h := startHarness(t, api, func(c *Config) {
		c.PostAcquire = AcquireHook(func(_ context.Context, tok Token) error {
			mu.Lock()
			defer mu.Unlock()
			n++
			calls.Store(tok.Epoch, true)
			if n == 1 {
				return errors.New("fence refused")
			}
			return nil
		})
	})
	waitFor(t, "the release after PostAcquire failed", func() bool {
		return api.numWrites() >= 2 && holder(api.current(t)) == ""
	})
	if got := h.lost(reasonPostAcquireFailed); got != 1 {
		t.Errorf("leadership_lost_total{reason=post_acquire_failed} = %v", got)
	}
	if h.e.IsLeader() {
		t.Error("leader after a failed PostAcquire")
	}
	h.waitSleepAfterWrites(t, t0.Add(2*time.Second), 2) // RetryPeriod after the failure, once released
	h.fc.Step(2 * time.Second)
	tok := h.waitStarted(t)
	first := api.writes[0].Annotations[EpochAnnotation]
	if strconv.FormatInt(tok.Epoch-1, 10) != first {
		t.Errorf("second acquisition at epoch %d, first at %s", tok.Epoch, first)
	}
}

// The Lease edited by hand to another epoch under the same holder: the leader steps down on the watch event
// and says why.
func TestHandEditedEpochStepsDown(t *testing.T) {
	api := newFakeAPI(t)
	h := startHarness(t, api, nil)
	tok := h.waitStarted(t)
	leadCtx := <-h.leadCtx
	l := api.current(t)
	l.Annotations[EpochAnnotation] = strconv.FormatInt(tok.Epoch+10, 10)
	if _, err := api.cs.CoordinationV1().Leases("ns").Update(context.Background(), l, metav1.UpdateOptions{FieldManager: FieldManagerFor(tok.Epoch + 10)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leadCtx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the leader did not step down")
	}
	want := "elector: leadership lost: epoch_changed: the Lease now carries epoch \"" + strconv.FormatInt(tok.Epoch+10, 10) + "\", not " + strconv.FormatInt(tok.Epoch, 10)
	if got := context.Cause(leadCtx); got == nil || got.Error() != want {
		t.Errorf("cause %v, want %s", got, want)
	}
	waitFor(t, "the loss to be counted", func() bool { return h.lost(reasonEpochChanged) == 1 })
	if h.e.IsLeader() {
		t.Error("IsLeader after stepping down")
	}
}

// Metrics (shared by every elector on a registry, told apart by the lease label) and Events on the Lease.
func TestMetricsAndEvents(t *testing.T) {
	api := newFakeAPI(t)
	api.seed(t, lease("", i32(1), map[string]string{EpochAnnotation: "41"}))
	h := startHarness(t, api, nil)
	tok := h.waitStarted(t)
	if tok.Epoch != 42 {
		t.Fatalf("epoch %d", tok.Epoch)
	}
	m := h.e.metrics
	for name, got := range map[string]float64{
		"is_leader":          testutil.ToFloat64(m.isLeader.WithLabelValues("ns/lock")),
		"epoch":              testutil.ToFloat64(m.epoch.WithLabelValues("ns/lock")),
		"acquisitions_total": testutil.ToFloat64(m.acquisitions.WithLabelValues("ns/lock")),
	} {
		if want := map[string]float64{"is_leader": 1, "epoch": 42, "acquisitions_total": 1}[name]; got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// A second elector on the same registry shares the collectors.
	other, err := New(Config{Client: api.cs, Namespace: "ns", Name: "other", Identity: "x"}, WithMetricsRegisterer(h.reg))
	if err != nil {
		t.Fatalf("a second elector on the same registry: %v", err)
	}
	if other.metrics.isLeader != m.isLeader {
		t.Error("the second elector registered its own collectors")
	}
	h.cancel()
	<-h.done
	if got := testutil.ToFloat64(m.isLeader.WithLabelValues("ns/lock")); got != 0 {
		t.Errorf("is_leader after release = %v", got)
	}
	close(h.rec.Events)
	var events []string
	for ev := range h.rec.Events {
		events = append(events, ev)
	}
	want := []string{"Normal Acquired acquired at epoch 42 by me", "Normal Released me released epoch 42"}
	if diff := cmpSteps(want, events); diff != "" {
		t.Error(diff)
	}
	n, err := testutil.GatherAndCount(h.reg)
	if err != nil || n == 0 {
		t.Errorf("gathering the registry: %d series, %v", n, err)
	}
}

// After a failed renewal the leader retries RetryPeriod later, stretched by up to 20% jitter; regular
// renewals are not jittered.
func TestRetryJitter(t *testing.T) {
	for name, tc := range map[string]struct {
		r    float64
		want time.Duration
	}{"r=0": {0, 2 * time.Second}, "r=0.5": {0.5, 2200 * time.Millisecond}, "r->1": {0.999, 2399600 * time.Microsecond}} {
		t.Run(name, func(t *testing.T) {
			if got := jittered(2*time.Second, retryJitter, tc.r); got != tc.want {
				t.Errorf("jittered(2s, 0.2, %v) = %v, want %v", tc.r, got, tc.want)
			}
		})
	}
	api := newFakeAPI(t)
	h := startHarnessWithClock(t, api, clocktesting.NewFakeClock(t0), nil, 0.5)
	h.waitStarted(t)
	h.waitSleep(t, t0.Add(2*time.Second)) // the first renewal: RetryPeriod after the acquisition, exactly
	api.mu.Lock()
	api.failWith = apierrors.NewServiceUnavailable("down")
	api.mu.Unlock()
	h.fc.Step(2 * time.Second)
	h.waitSleep(t, t0.Add(4200*time.Millisecond)) // failed at t0+2s: retry after 2s * 1.1
}
