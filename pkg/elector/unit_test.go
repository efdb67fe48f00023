package elector

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestConfigValidation(t *testing.T) {
	valid := func() Config {
		return Config{Client: fake.NewClientset(), Namespace: "ns", Name: "lock", Identity: "me"}
	}
	tests := map[string]struct {
		mutate func(*Config)
		want   string // "" = valid
	}{
		"defaults": {mutate: func(*Config) {}},
		"short durations with a small margin": {mutate: func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod, c.SafetyMargin = 2*time.Second, 1500*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
		}},
		"no client": {mutate: func(c *Config) { c.Client = nil }, want: "elector: invalid config: client must be set"},
		"no names": {mutate: func(c *Config) { c.Namespace, c.Name = "", "" },
			want: "elector: invalid config: lease namespace must be set\nlease name must be set"},
		"lease duration not above renew deadline": {mutate: func(c *Config) { c.LeaseDuration = 10 * time.Second },
			want: "elector: invalid config: leaseDuration (10s) must be greater than renewDeadline (10s)\n" +
				"the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = 10s*(1-0.01)-2s = 7.9s must be greater than renewDeadline (10s)"},
		"renew deadline not above retry period": {mutate: func(c *Config) { c.RetryPeriod = 10 * time.Second },
			want: "elector: invalid config: renewDeadline (10s) must be greater than retryPeriod (10s)"},
		"negative retry period": {mutate: func(c *Config) { c.RetryPeriod = -time.Second },
			want: "elector: invalid config: retryPeriod must be positive, got -1s"},
		"drift of 1": {mutate: func(c *Config) { c.MaxClockDrift = 1 },
			want: "elector: invalid config: maxClockDrift must be in [0, 1), got 1\n" +
				"the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = 15s*(1-1)-2s = -2s must be greater than renewDeadline (10s)"},
		"negative drift": {mutate: func(c *Config) { c.MaxClockDrift = -0.1 },
			want: "elector: invalid config: maxClockDrift must be in [0, 1), got -0.1"},
		"negative margin": {mutate: func(c *Config) { c.SafetyMargin = -time.Second },
			want: "elector: invalid config: safetyMargin must not be negative, got -1s"},
		"negative lock delay": {mutate: func(c *Config) { c.LockDelay = -time.Second },
			want: "elector: invalid config: lockDelay must not be negative, got -1s"},
		"margin eats the window": {mutate: func(c *Config) { c.SafetyMargin = 5 * time.Second },
			want: "elector: invalid config: the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = 15s*(1-0.01)-5s = 9.85s must be greater than renewDeadline (10s)"},
		"fences declared without a hook": {mutate: func(c *Config) { c.PostAcquire = AcquireFence{fences: Fences{Objects: true}} },
			want: `elector: invalid config: postAcquire declares "objects" but has no hook to raise them`},
		"negative release timeout": {mutate: func(c *Config) { c.ReleaseTimeout = -time.Second },
			want: "elector: invalid config: releaseTimeout must be positive, got -1s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := valid()
			tc.mutate(&cfg)
			_, err := New(cfg, WithMetricsRegisterer(nil))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("New() error:\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestDefaultIdentity(t *testing.T) {
	t.Setenv("POD_NAME", "orders-7d9f")
	e, err := New(Config{Client: fake.NewClientset(), Namespace: "ns", Name: "lock"}, WithMetricsRegisterer(nil))
	if err != nil {
		t.Fatal(err)
	}
	if id := e.Identity(); !strings.HasPrefix(id, "orders-7d9f-") || len(id) != len("orders-7d9f-")+5 {
		t.Errorf("Identity() = %q, want orders-7d9f-<5 random characters>", id)
	}
}

func TestSafeDeadline(t *testing.T) {
	tests := map[string]struct {
		lease  time.Duration
		drift  float64
		margin time.Duration
		want   time.Duration
	}{
		"defaults: 15s*0.99-2s":    {15 * time.Second, 0.01, 2 * time.Second, 12850 * time.Millisecond},
		"10s, 1%, no margin":       {10 * time.Second, 0.01, 0, 9900 * time.Millisecond},
		"test durations: 2s, 0.2s": {2 * time.Second, 0.01, 200 * time.Millisecond, 1780 * time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sent := t0.Add(time.Hour)
			if got := safeDeadline(sent, SafeWindow(tc.lease, tc.drift, tc.margin)); !got.Equal(sent.Add(tc.want)) {
				t.Errorf("deadline = sent + %v, want sent + %v", got.Sub(sent), tc.want)
			}
		})
	}
	if got := renewStepDownAt(t0, DefaultRenewDeadline); !got.Equal(t0.Add(10 * time.Second)) {
		t.Errorf("renew step-down at t0 + %v, want t0 + 10s", got.Sub(t0))
	}
}

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

func TestTakeoverTime(t *testing.T) {
	obs := t0.Add(time.Minute)
	tests := map[string]struct {
		lease     *coordinationv1.Lease
		lockDelay time.Duration
		want      takeover
	}{
		"absent: at once":            {nil, 5 * time.Second, takeover{at: obs, why: "absent"}},
		"released (empty holder)":    {lease("", i32(1), nil), 5 * time.Second, takeover{at: obs, why: "released"}},
		"released (no holder)":       {lease("-", i32(15), nil), 0, takeover{at: obs, why: "released"}},
		"held: observation + 15s":    {lease("a", i32(15), nil), 0, takeover{at: obs.Add(15 * time.Second), why: "expiry"}},
		"held, lock-delay 5s":        {lease("a", i32(15), nil), 5 * time.Second, takeover{at: obs.Add(20 * time.Second), why: "expiry"}},
		"missing duration: expired":  {lease("a", nil, nil), 0, takeover{at: obs, why: "malformed", detail: "spec.leaseDurationSeconds is missing"}},
		"negative duration: expired": {lease("a", i32(-3), nil), time.Second, takeover{at: obs.Add(time.Second), why: "malformed", detail: "spec.leaseDurationSeconds is not positive"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := takeoverTime(observation{lease: tc.lease, at: obs}, tc.lockDelay)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(takeover{})); diff != "" {
				t.Errorf("takeoverTime() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextEpoch(t *testing.T) {
	ann := func(v string) map[string]string { return map[string]string{EpochAnnotation: v} }
	unlabelled := func(l *coordinationv1.Lease) *coordinationv1.Lease { l.Labels = nil; return l }
	withRV := func(l *coordinationv1.Lease, rv string) *coordinationv1.Lease { l.ResourceVersion = rv; return l }
	const prefix = "elector: no epoch can be issued safely: lease ns/lock: "
	tests := map[string]struct {
		lease   *coordinationv1.Lease
		listRV  string
		floor   int64
		want    epochChoice
		wantErr string
	}{
		"previous + 1":          {lease: lease("a", i32(15), ann("41")), want: epochChoice{epoch: 42}},
		"create: the list RV":   {listRV: "9001", want: epochChoice{epoch: 9001, seed: "lease is being created"}},
		"no annotation: own RV": {lease: lease("a", i32(15), nil), want: epochChoice{epoch: 500, seed: "annotation fencing.fencekit.io/epoch is missing"}},
		"garbage: own RV":       {lease: lease("a", i32(15), ann("x7")), want: epochChoice{epoch: 500, seed: `annotation fencing.fencekit.io/epoch="x7" is not a decimal int64`}},
		"leading zero: own RV":  {lease: lease("a", i32(15), ann("07")), want: epochChoice{epoch: 500, seed: `annotation fencing.fencekit.io/epoch="07" is not a decimal int64`}},
		"zero: own RV":          {lease: lease("a", i32(15), ann("0")), want: epochChoice{epoch: 500, seed: `annotation fencing.fencekit.io/epoch="0" is below 1`}},
		// Nobody guards the annotation of an unlabelled Lease.
		"unlabelled at an old epoch: own RV": {lease: unlabelled(lease("", i32(1), ann("1"))), floor: 3,
			want: epochChoice{epoch: 500, seed: "the Lease lacks the label fencing.fencekit.io/fenced=true, so no policy guarded its annotation fencing.fencekit.io/epoch"}},
		"unlabelled above its own RV": {lease: unlabelled(lease("", i32(1), ann("600"))),
			wantErr: prefix + "the next epoch 500 is not above 600, the epoch in its annotation fencing.fencekit.io/epoch; an admin must repair the Lease"},
		// The epoch space is bounded, and nothing overflows.
		"MaxEpoch - 1 + 1": {lease: lease("a", i32(15), ann("9007199254740990")), want: epochChoice{epoch: MaxEpoch}},
		"at MaxEpoch": {lease: lease("a", i32(15), ann("9007199254740991")),
			wantErr: "elector: no epoch can be issued safely: lease ns/lock is at epoch 9007199254740991; the next epoch 9007199254740992 would exceed the highest epoch 9007199254740991"},
		"above MaxEpoch": {lease: lease("a", i32(15), ann("9007199254740992")),
			wantErr: prefix + "the next epoch 500 is not above 9007199254740992, the epoch in its annotation fencing.fencekit.io/epoch; an admin must repair the Lease"},
		"at MaxInt64": {lease: lease("a", i32(15), ann("9223372036854775807")),
			wantErr: prefix + "the next epoch 500 is not above 9223372036854775807, the epoch in its annotation fencing.fencekit.io/epoch; an admin must repair the Lease"},
		"seen MaxInt64, then garbage: no overflow": {lease: lease("", i32(1), ann("garbage")), floor: math.MaxInt64,
			wantErr: prefix + "the next epoch 500 is not above 9223372036854775807, the highest epoch this elector has seen under this name; an admin must repair the Lease"},
		"seed RV above MaxEpoch": {lease: withRV(lease("a", i32(15), nil), "9007199254740992"),
			wantErr: prefix + "the seed resourceVersion 9007199254740992 exceeds the highest epoch 9007199254740991"},
		"create: list RV above MaxEpoch": {listRV: "9007199254740992",
			wantErr: prefix + "the seed resourceVersion 9007199254740992 exceeds the highest epoch 9007199254740991"},
		"below the floor: refused, not bumped": {lease: lease("a", i32(15), ann("3")), floor: 10,
			wantErr: prefix + "the next epoch 4 is not above 10, the highest epoch this elector has seen under this name; an admin must repair the Lease"},
		"create: list RV at the floor": {listRV: "10", floor: 10,
			wantErr: prefix + "the next epoch 10 is not above 10, the highest epoch this elector has seen under this name; an admin must repair the Lease"},
		"create: bad list RV":      {listRV: "abc", wantErr: `lease ns/lock: seeding the epoch of a new Lease from the list resourceVersion: elector: resourceVersion is not a positive integer: "abc"`},
		"create: leading zero RV":  {listRV: "0123", wantErr: `lease ns/lock: seeding the epoch of a new Lease from the list resourceVersion: elector: resourceVersion is not a positive integer: "0123"`},
		"no epoch and a bad RV":    {lease: withRV(lease("a", i32(15), nil), "-1"), wantErr: `lease ns/lock: seeding the epoch from the Lease's resourceVersion (annotation fencing.fencekit.io/epoch is missing): elector: resourceVersion is not a positive integer: "-1"`},
		"create above MaxInt64 RV": {listRV: "9223372036854775808", wantErr: `lease ns/lock: seeding the epoch of a new Lease from the list resourceVersion: elector: resourceVersion is not a positive integer: "9223372036854775808"`},
	}
	name := types.NamespacedName{Namespace: "ns", Name: "lock"}
	for n, tc := range tests {
		t.Run(n, func(t *testing.T) {
			got, err := nextEpoch(name, tc.lease, tc.listRV, tc.floor)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v\nwant %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(epochChoice{})); diff != "" {
				t.Errorf("nextEpoch() (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := nextEpoch(name, nil, "abc", 0); !errors.Is(err, ErrInvalidResourceVersion) {
		t.Errorf("a bad resourceVersion is not ErrInvalidResourceVersion: %v", err)
	}
	if _, err := nextEpoch(name, lease("a", i32(15), ann("9007199254740991")), "", 0); !errors.Is(err, ErrNoEpoch) {
		t.Errorf("an exhausted epoch is not ErrNoEpoch: %v", err)
	}
}

func TestLeaseSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int32{15 * time.Second: 15, 1500 * time.Millisecond: 2, time.Millisecond: 1} {
		if got := leaseSeconds(d); got != want {
			t.Errorf("leaseSeconds(%v) = %d, want %d (rounded up)", d, got, want)
		}
	}
}

// The leadership context ends the moment the safe-work deadline passes, and a renewal moves it forward.
func TestTermDeadline(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	tm := newTerm(context.Background(), fc, Token{Epoch: 1}, t0.Add(12850*time.Millisecond))
	tm.setLeading()
	waitFor(t, "the deadline timer", fc.HasWaiters)
	if d, ok := tm.ctx.Deadline(); !ok || !d.Equal(t0.Add(12850*time.Millisecond)) {
		t.Errorf("Deadline() = %v, %v", d, ok)
	}
	tm.extend(t0.Add(14 * time.Second)) // a renewal sent at t0+1.15s
	tm.extend(t0.Add(13 * time.Second)) // never moves back
	fc.Step(12900 * time.Millisecond)   // past the first deadline: the timer re-arms for the new one
	if !tm.valid(fc.Now()) {
		t.Fatal("the term ended at its old deadline after a renewal moved it")
	}
	waitFor(t, "the re-armed deadline timer", fc.HasWaiters)
	if tm.ctx.Err() != nil {
		t.Fatalf("context ended early: %v", tm.ctx.Err())
	}
	fc.Step(1100 * time.Millisecond) // t0+14s
	if tm.valid(fc.Now()) {
		t.Error("valid past the deadline") // synchronous: does not wait for the timer goroutine
	}
	select {
	case <-tm.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the leadership context was not cancelled at the deadline")
	}
	if !errors.Is(context.Cause(tm.ctx), ErrDeadlinePassed) || tm.ctx.Err() != context.DeadlineExceeded {
		t.Errorf("cause %v, err %v", context.Cause(tm.ctx), tm.ctx.Err())
	}
}

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

// An Event note is cut to the 1024 bytes events.k8s.io/v1 accepts, at a UTF-8 boundary: a longer one is
// refused by the apiserver and the Event lost (a fence-on-acquire that failed on 100 resources did that).
func TestNoteLimit(t *testing.T) {
	if got := note("%s lost epoch %d", "a", 7); got != "a lost epoch 7" {
		t.Errorf("short note %q", got)
	}
	long := note("%s", strings.Repeat("é", 600)) // 1200 bytes, 2 per rune
	if len(long) > noteLimit || !strings.HasSuffix(long, "...") || !utf8.ValidString(long) {
		t.Errorf("long note: %d bytes, valid UTF-8 %v, ends %q", len(long), utf8.ValidString(long), long[len(long)-5:])
	}
	if exact := strings.Repeat("x", noteLimit); note("%s", exact) != exact {
		t.Errorf("a note of exactly %d bytes was cut", noteLimit)
	}
}

func TestParseFences(t *testing.T) {
	for _, f := range []Fences{{}, {FencedResources: true}, {Objects: true}, {FencedResources: true, Objects: true}} {
		got, err := ParseFences(f.String())
		if err != nil || got != f {
			t.Errorf("ParseFences(%q) = %+v, %v; want %+v", f.String(), got, err, f)
		}
	}
	for _, s := range []string{"objects,fencedresources", "FencedResources", " objects", "fencedresources,", "all"} {
		if _, err := ParseFences(s); err == nil || !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Errorf("ParseFences(%q): %v, want an error naming the value", s, err)
		}
	}
}

func TestEpochFromFieldManager(t *testing.T) {
	for fm, want := range map[string]int64{
		"fencing.fencekit.io/epoch=7":                7,
		"fencing.fencekit.io/epoch=9007199254740991": MaxEpoch,
		"fencing.fencekit.io/epoch=9007199254740992": 0, // above MaxEpoch
		"fencing.fencekit.io/epoch=0":                0,
		"fencing.fencekit.io/epoch=07":               0,
		"fencing.fencekit.io/epoch=+7":               0,
		"fencing.fencekit.io/epoch=-7":               0,
		"fencing.fencekit.io/epoch=":                 0,
		"fencing.fencekit.io/epoch=7 ":               0,
		"kubectl-edit":                               0,
		"":                                           0,
	} {
		got, ok := EpochFromFieldManager(fm)
		if got != want || ok != (want != 0) {
			t.Errorf("EpochFromFieldManager(%q) = %d, %v; want %d, %v", fm, got, ok, want, want != 0)
		}
	}
	if got := (Token{Epoch: 42}).FieldManager(); got != "fencing.fencekit.io/epoch=42" {
		t.Errorf("Token{Epoch: 42}.FieldManager() = %q", got)
	}
}
