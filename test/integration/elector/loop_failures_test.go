package elector_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The elector's loop when requests or PostAcquire fail, on the apiserver and a fake clock (loop_test.go).

// errUnreachable fails a Lease write before it leaves the process, as a broken network path does.
var errUnreachable = errors.New("injected: the apiserver is unreachable")

// unreachable makes every Lease write of l fail from now on, and counts the attempts.
func (l *loop) unreachable() *atomic.Int32 {
	var attempts atomic.Int32
	l.setOnWrite(func() error { attempts.Add(1); return errUnreachable })
	return &attempts
}

// waitSleepWithin waits until the elector has set its timer for a time in [from, to) and returns it.
func (l *loop) waitSleepWithin(t *testing.T, from, to time.Time) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, testenv.EventuallyTimeout, "the elector to sleep until a time in [t0+"+from.Sub(t0).String()+", t0+"+to.Sub(t0).String()+")", func() bool {
		var ok bool
		at, ok = l.clock.sleepsWithin(from, to)
		return ok
	})
	return at
}

// The leader steps down when RenewDeadline has passed since its last successful renewal was sent, and
// never reports leadership past the safe-work deadline.
func TestRenewDeadlineStepDown(t *testing.T) {
	l := newLoop(t)
	l.start(t, nil)
	tok := l.waitStarted(t)
	leadCtx := <-l.leadCtx
	// The first renewal is due RetryPeriod after the acquisition, exactly: regular renewals are not
	// jittered.
	l.waitSleep(t, t0.Add(2*time.Second))
	attempts := l.unreachable()
	now := t0
	for i := 1; i <= 4; i++ {
		// A failed renewal is retried RetryPeriod later, stretched by up to 20 % jitter.
		next := now.Add(2 * time.Second)
		if i > 1 {
			next = l.waitSleepWithin(t, now.Add(2*time.Second), now.Add(2400*time.Millisecond))
		}
		l.clock.Step(next.Sub(now))
		now = next
		eventually(t, testenv.EventuallyTimeout, "renewal attempt "+strconv.Itoa(i), func() bool { return attempts.Load() >= int32(i) })
		if !l.e.IsLeader() {
			t.Fatalf("stepped down at t0+%v, before the renew deadline", now.Sub(t0))
		}
	}
	// The fourth failed renewal was sent by t0+9.2s (2s + 3*2.4s), the fifth would be due after t0+10s:
	// the next sleep ends at the step-down time, t0+10s.
	l.waitSleep(t, t0.Add(10*time.Second))
	l.clock.Step(t0.Add(10 * time.Second).Sub(now))
	select {
	case <-leadCtx.Done():
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatal("the leader did not step down at the renew deadline")
	}
	if cause := context.Cause(leadCtx); !errors.Is(cause, elector.ErrLeadershipLost) || errors.Is(cause, elector.ErrLeaseTaken) {
		t.Errorf("cause %v, want ErrLeadershipLost, not ErrLeaseTaken (nobody else can lead before the Lease expires)", cause)
	}
	eventually(t, testenv.EventuallyTimeout, "the loss to be counted", func() bool { return l.lost(t, "renew_deadline") == 1 })
	if l.e.IsLeader() || !l.e.Token().IsZero() || !l.e.Deadline().IsZero() {
		t.Errorf("after stepping down: IsLeader %v, Token %v, Deadline %v", l.e.IsLeader(), l.e.Token(), l.e.Deadline())
	}
	if got := attempts.Load(); got != 4 {
		t.Errorf("%d renewal attempts, want 4 (one per retry period)", got)
	}
	if got := l.lease(t); holderOf(got) != "me" || got.Annotations[protocol.EpochAnnotation] != strconv.FormatInt(tok.Epoch, 10) {
		t.Errorf("the Lease after the failed renewals: holder %q epoch %q, want the last renewal's (me, %d)",
			holderOf(got), got.Annotations[protocol.EpochAnnotation], tok.Epoch)
	}
}

// A failing PostAcquire: leadership is not reported, the Lease is released, the loss is counted, and the
// elector competes again after RetryPeriod (jittered), at the next epoch.
func TestPostAcquireFailure(t *testing.T) {
	l := newLoop(t)
	l.seed(t, "", 1, "6")
	var mu sync.Mutex
	var epochs []int64
	l.start(t, func(c *elector.Config) {
		c.PostAcquire = elector.AcquireHook(func(_ context.Context, tok elector.Token) error {
			mu.Lock()
			defer mu.Unlock()
			if epochs = append(epochs, tok.Epoch); len(epochs) == 1 {
				return errors.New("fence refused")
			}
			return nil
		})
	})
	eventually(t, testenv.EventuallyTimeout, "the loss to be counted", func() bool { return l.lost(t, "post_acquire_failed") == 1 })
	// The loss is counted before the release is written.
	testenv.EventuallyWithin(t, testenv.EventuallyTimeout, "the Lease released at epoch 7", func() (bool, string) {
		got := l.lease(t)
		return holderOf(got) == "" && got.Annotations[protocol.EpochAnnotation] == "7",
			fmt.Sprintf("holder %q epoch %q", holderOf(got), got.Annotations[protocol.EpochAnnotation])
	})
	if l.e.IsLeader() || !l.e.Token().IsZero() {
		t.Errorf("after a failed PostAcquire: IsLeader %v, Token %v", l.e.IsLeader(), l.e.Token())
	}
	select {
	case tok := <-l.started:
		t.Fatalf("OnStartedLeading called with %v after a failed PostAcquire", tok)
	default:
	}
	retry := l.waitSleepWithin(t, t0.Add(2*time.Second), t0.Add(2400*time.Millisecond))
	l.clock.Step(retry.Sub(t0) - time.Millisecond)
	if got := holderOf(l.lease(t)); got != "" {
		t.Fatalf("competed again before RetryPeriod: the Lease is held by %q", got)
	}
	l.clock.Step(time.Millisecond)
	if tok := l.waitStarted(t); tok.Epoch != 8 {
		t.Errorf("second acquisition at epoch %d, want 8", tok.Epoch)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(epochs) != 2 || epochs[0] != 7 || epochs[1] != 8 {
		t.Errorf("PostAcquire ran at epochs %v, want [7 8]", epochs)
	}
}

// PostAcquire failing every time (a permanent error: the fence's RBAC is missing) is not retried every
// RetryPeriod for ever: the pause doubles after each failure in a row (2 s, 4 s, 8 s, ..., each stretched
// by the retry's jitter) up to MaxPostAcquireBackoff, and a term that leads resets it.
func TestPostAcquireFailuresBackOff(t *testing.T) {
	l := newLoop(t)
	var tries atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	l.start(t, func(c *elector.Config) {
		c.PostAcquire = elector.AcquireHook(func(context.Context, elector.Token) error {
			tries.Add(1)
			if fail.Load() {
				return errors.New("fencingpolicies is forbidden")
			}
			return nil
		})
	})
	now := t0
	for i, pause := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second} {
		eventually(t, testenv.EventuallyTimeout, "failure "+strconv.Itoa(i+1)+" to be counted", func() bool {
			return l.lost(t, "post_acquire_failed") == float64(i+1)
		})
		// The pause is the jittered RetryPeriod, doubled: in [pause, pause*1.2).
		next := l.waitSleepWithin(t, now.Add(pause), now.Add(pause*6/5))
		if got := tries.Load(); got != int32(i+1) {
			t.Fatalf("%d PostAcquire tries before the pause of %v, want %d", got, pause, i+1)
		}
		if i == 3 {
			fail.Store(false)
		}
		l.clock.Step(next.Sub(now))
		now = next
	}
	l.waitStarted(t)
	if got := l.lost(t, "post_acquire_failed"); got != 4 {
		t.Errorf("leadership_lost_total{reason=post_acquire_failed} = %v, want 4", got)
	}
	if got := tries.Load(); got != 5 {
		t.Errorf("%d PostAcquire tries, want 5", got)
	}
}
