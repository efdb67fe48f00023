package elector

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Causes of the end of a leadership context, as reported by context.Cause.
var (
	// ErrDeadlinePassed: the safe-work deadline passed (the leader could not renew in time, or was paused).
	ErrDeadlinePassed = errors.New("elector: safe-work deadline passed")
	// ErrLeadershipLost: the elector stepped down (renew deadline, another holder or epoch, Lease deleted).
	ErrLeadershipLost = errors.New("elector: leadership lost")
	// ErrReleased: Run's context ended; the elector releases the Lease (unless ReleaseOnCancel is false).
	ErrReleased = errors.New("elector: leadership released")
	// ErrLeaseTaken: with ErrLeadershipLost, the Lease names another holder or epoch, or was deleted: another
	// elector may lead now, before this one's safe-work deadline.
	ErrLeaseTaken = errors.New("elector: the Lease is another's")
)

// lostError is the cause of an involuntary end: it is ErrLeadershipLost, and ErrLeaseTaken when taken.
type lostError struct {
	msg   string
	taken bool
}

func (e *lostError) Error() string { return e.msg }

func (e *lostError) Is(target error) bool {
	return target == ErrLeadershipLost || (e.taken && target == ErrLeaseTaken)
}

// term is one leadership: from an acquisition to its end.
type term struct {
	token Token

	mu       sync.Mutex
	deadline time.Time // the current safe-work deadline (moves forward with each renewal)
	leading  bool      // the leadership started (begin): IsLeader, is_leader, OnStartedLeading
	// giveBack ends the term's hold of the process's leadership of the Lease (takeLeadership); nil until
	// begin.
	giveBack func()
	// handedOver is set, by the loop only, once PostAcquire succeeded (or there is none) and the term
	// waits for, or has, the process's leadership of the Lease.
	handedOver bool

	ctx    *leaderContext
	cancel context.CancelCauseFunc
	// done is closed when OnStartedLeading has returned (or was never started).
	done chan struct{}
	// delayed runs the deadline timer (armDeadlineLocked); nil with a clock that runs no functions
	// (enforceDeadline). deadlineTimer is the timer set for the current deadline.
	delayed       clock.WithDelayedExecution
	deadlineTimer clock.Timer
}

func newTerm(parent context.Context, clk clock.WithTicker, token Token, deadline time.Time) *term {
	inner, cancel := context.WithCancelCause(parent)
	t := &term{token: token, deadline: deadline, cancel: cancel, done: make(chan struct{})}
	t.ctx = &leaderContext{Context: inner, t: t}
	if delayed, ok := clk.(clock.WithDelayedExecution); ok {
		t.delayed = delayed
		t.mu.Lock()
		t.armDeadlineLocked()
		t.mu.Unlock()
	} else {
		go t.enforceDeadline(clk)
	}
	return t
}

// armDeadlineLocked sets a timer that cancels the leadership context the moment the safe-work deadline
// passes, with no goroutine waiting on it (a process leading 1,000 Leases would otherwise keep 1,000
// goroutines for their deadlines). Each renewal sets it again for the new deadline (extend), so a term that
// keeps renewing never runs it; when it runs before the current deadline (a renewal raced it) it is set
// again for that one. A timer still pending is Reset; one that has run is replaced, never Reset: a fake
// clock (k8s.io/utils/clock/testing) blocks on the second run of a timer while it holds its own lock. A term
// that ended leaves its timer to run once and do nothing. t.mu is held.
func (t *term) armDeadlineLocked() {
	wait := t.deadline.Sub(t.delayed.Now())
	if t.deadlineTimer != nil && t.deadlineTimer.Stop() {
		t.deadlineTimer.Reset(wait)
		return
	}
	// A fake clock runs the function while it holds its own lock, which the clock's Now needs: run it apart.
	t.deadlineTimer = t.delayed.AfterFunc(wait, func() { go t.deadlineTimerRan() })
}

// deadlineTimerRan ends the leadership context if the deadline has passed, or sets the timer again for it.
func (t *term) deadlineTimerRan() {
	if t.ctx.Context.Err() != nil {
		return
	}
	t.mu.Lock()
	passed := !t.delayed.Now().Before(t.deadline)
	if !passed {
		t.armDeadlineLocked()
	}
	t.mu.Unlock()
	if passed {
		t.cancel(ErrDeadlinePassed)
	}
}

// enforceDeadline is armDeadlineLocked for a clock that runs no functions of its own: a goroutine waits on a
// timer for the current deadline.
func (t *term) enforceDeadline(clk clock.WithTicker) {
	for {
		wait := t.getDeadline().Sub(clk.Now())
		if wait <= 0 {
			t.cancel(ErrDeadlinePassed)
			return
		}
		timer := clk.NewTimer(wait)
		select {
		case <-timer.C():
		case <-t.ctx.Done():
			timer.Stop()
			return
		}
	}
}

func (t *term) getDeadline() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deadline
}

// extend moves the deadline forward (never back), and the deadline timer with it.
func (t *term) extend(d time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.After(t.deadline) {
		t.deadline = d
		if t.delayed != nil && t.ctx.Context.Err() == nil {
			t.armDeadlineLocked()
		}
	}
}

// valid reports whether the term is leading and before its deadline at now.
func (t *term) valid(now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading && now.Before(t.deadline) && t.ctx.Context.Err() == nil
}

// begin starts the leadership unless the term has ended: it records giveBack and runs started (the
// is_leader count) under the term's lock, so that whoever ends the term (endTerm, after cancelling the
// leadership context) finds leading and the count in agreement.
func (t *term) begin(giveBack, started func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Context.Err() != nil {
		return false
	}
	t.leading, t.giveBack = true, giveBack
	started()
	return true
}

// giveBackLeadership gives back the process's leadership of the Lease, if the term took it.
func (t *term) giveBackLeadership() {
	t.mu.Lock()
	giveBack := t.giveBack
	t.mu.Unlock()
	if giveBack != nil {
		giveBack()
	}
}

func (t *term) isLeading() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leading
}

// leaderContext is the leadership context: cancelled when the term ends, and its Deadline is the current
// safe-work deadline. The deadline moves forward with each renewal; an earlier value is always a
// conservative bound. Err reports context.DeadlineExceeded when the deadline ended it.
type leaderContext struct {
	context.Context
	t *term
}

func (c *leaderContext) Deadline() (time.Time, bool) { return c.t.getDeadline(), true }

func (c *leaderContext) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), ErrDeadlinePassed) {
		return context.DeadlineExceeded
	}
	return err
}
