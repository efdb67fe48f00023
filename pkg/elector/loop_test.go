package elector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// in-package test cannot use test/util/testenv's poller (testenv imports pkg/elector), so it calls the
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
// compare-and-swap updates; failWith lets a test fail every update. The tests on it set the elector's
// retry jitter (rand), which only this package reaches; the loop tests that need no fixed jitter run on the
// real apiserver (test/integration/elector, loop_test.go).
type fakeAPI struct {
	cs *fake.Clientset

	mu       sync.Mutex
	rv       int64
	writes   []*coordinationv1.Lease // every successful write, in order
	attempts int                     // update attempts
	failWith error                   // non-nil: every update fails
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
	e       *Elector
	fc      *clocktesting.FakeClock
	api     *fakeAPI
	reg     *prometheus.Registry
	started chan Token
	leadCtx chan context.Context
	stopped chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
	rec     *events.FakeRecorder
	jitter  float64      // what the elector's jitter source returns
	wake    atomic.Int64 // when the loop last went to sleep until (unix nanoseconds of the fake clock)
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

// startHarness runs an elector on api and a fake clock at t0, with mutate applied to its Config; its retry
// jitter source returns jitter (default 0).
func startHarness(t *testing.T, api *fakeAPI, mutate func(*Config), jitter ...float64) *harness {
	t.Helper()
	h := &harness{fc: clocktesting.NewFakeClock(t0), api: api, reg: prometheus.NewRegistry(),
		started: make(chan Token, 10), leadCtx: make(chan context.Context, 10), stopped: make(chan struct{}, 10),
		done: make(chan struct{})}
	cfg := Config{Client: api.cs, Namespace: "ns", Name: "lock", Identity: "me",
		OnStartedLeading: func(ctx context.Context, tok Token) {
			h.started <- tok
			h.leadCtx <- ctx
			<-ctx.Done()
		},
		OnStoppedLeading: func() { h.stopped <- struct{}{} },
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
	h := startHarness(t, api, nil, 0.5)
	h.waitStarted(t)
	h.waitSleep(t, t0.Add(2*time.Second)) // the first renewal: RetryPeriod after the acquisition, exactly
	api.mu.Lock()
	api.failWith = apierrors.NewServiceUnavailable("down")
	api.mu.Unlock()
	h.fc.Step(2 * time.Second)
	h.waitSleep(t, t0.Add(4200*time.Millisecond)) // failed at t0+2s: retry after 2s * 1.1
}
