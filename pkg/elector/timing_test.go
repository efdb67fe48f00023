package elector

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
)

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

func TestLeaseSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int32{15 * time.Second: 15, 1500 * time.Millisecond: 2, time.Millisecond: 1} {
		if got := leaseSeconds(d); got != want {
			t.Errorf("leaseSeconds(%v) = %d, want %d (rounded up)", d, got, want)
		}
	}
}

// A failed request is retried RetryPeriod later, stretched by up to 20 % jitter.
func TestJittered(t *testing.T) {
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
}

// After PostAcquire failed several times in a row, the pause doubles up to MaxPostAcquireBackoff.
func TestPostAcquireBackoff(t *testing.T) {
	for _, tc := range []struct {
		first    time.Duration
		failures int
		want     time.Duration
	}{
		{2 * time.Second, 1, 2 * time.Second},
		{2 * time.Second, 2, 4 * time.Second},
		{2 * time.Second, 5, 32 * time.Second},
		{2 * time.Second, 6, MaxPostAcquireBackoff},
		{2 * time.Second, 1000, MaxPostAcquireBackoff},
		{3 * time.Minute, 4, 3 * time.Minute}, // a RetryPeriod above the bound is kept
	} {
		if got := postAcquireBackoff(tc.first, tc.failures); got != tc.want {
			t.Errorf("postAcquireBackoff(%v, %d) = %v, want %v", tc.first, tc.failures, got, tc.want)
		}
	}
}

func TestRenewalSchedule(t *testing.T) {
	tests := map[string]struct {
		latency  time.Duration
		wantNext time.Duration // after the send
		wantSlow bool
	}{
		"answered at once":                          {0, 2 * time.Second, false},
		"a usual renewal":                           {20 * time.Millisecond, 2020 * time.Millisecond, false},
		"queued 4s: half the margin, not past it":   {4 * time.Second, 6 * time.Second, false},
		"queued just past half the margin":          {4*time.Second + time.Millisecond, 6*time.Second + time.Millisecond, true},
		"queued 7.9s: the next one is due at 9.9 s": {7900 * time.Millisecond, 9900 * time.Millisecond, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sent := t0.Add(time.Hour)
			if got := nextRenewalAt(sent.Add(tc.latency), DefaultRetryPeriod); !got.Equal(sent.Add(tc.wantNext)) {
				t.Errorf("next renewal at sent + %v, want sent + %v (RetryPeriod after the answer)", got.Sub(sent), tc.wantNext)
			}
			if got := slowRenewal(tc.latency, DefaultRenewDeadline, DefaultRetryPeriod); got != tc.wantSlow {
				t.Errorf("slowRenewal(%v, 10s, 2s) = %v, want %v", tc.latency, got, tc.wantSlow)
			}
		})
	}
}
