package elector

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// PostAcquire failing every time (a permanent error: the fence's RBAC is missing) is not retried every
// RetryPeriod for ever: the pause doubles after each failure in a row (2 s, 4 s, 8 s, ...) up to
// MaxPostAcquireBackoff, and a term that leads resets it.
func TestPostAcquireFailuresBackOff(t *testing.T) {
	api := newFakeAPI(t)
	var tries atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	h := startHarness(t, api, func(c *Config) {
		c.PostAcquire = AcquireHook(func(context.Context, Token) error {
			tries.Add(1)
			if fail.Load() {
				return errors.New("fencingpolicies is forbidden")
			}
			return nil
		})
	})
	now := t0
	for i, pause := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second} {
		writes := 2 * (i + 1) // each try: the acquisition and the release
		waitFor(t, "the release after the failed PostAcquire", func() bool { return api.numWrites() >= writes })
		h.waitSleepAfterWrites(t, now.Add(pause), writes)
		if got := tries.Load(); got != int32(i+1) {
			t.Fatalf("%d PostAcquire tries before the pause of %v, want %d", got, pause, i+1)
		}
		if i == 3 {
			fail.Store(false)
		}
		h.fc.Step(pause)
		now = now.Add(pause)
	}
	h.waitStarted(t)
	if got := h.lost(reasonPostAcquireFailed); got != 4 {
		t.Errorf("leadership_lost_total{reason=post_acquire_failed} = %v, want 4", got)
	}
}

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
