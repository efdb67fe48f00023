package elector

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// tickerOnly hides the fake clock's AfterFunc: a clock that runs no functions of its own.
type tickerOnly struct{ clock.WithTicker }

// The leadership context ends the moment the safe-work deadline passes, and a renewal moves it forward:
// with a clock that runs functions (a timer, no goroutine) and with one that does not (a goroutine).
func TestTermDeadline(t *testing.T) {
	for name, wrap := range map[string]func(*clocktesting.FakeClock) clock.WithTicker{
		"AfterFunc":    func(fc *clocktesting.FakeClock) clock.WithTicker { return fc },
		"no AfterFunc": func(fc *clocktesting.FakeClock) clock.WithTicker { return tickerOnly{fc} },
	} {
		t.Run(name, func(t *testing.T) { testTermDeadline(t, wrap) })
	}
}

func testTermDeadline(t *testing.T, wrap func(*clocktesting.FakeClock) clock.WithTicker) {
	fc := clocktesting.NewFakeClock(t0)
	tm := newTerm(context.Background(), wrap(fc), Token{Epoch: 1}, t0.Add(12850*time.Millisecond))
	if !tm.begin(func() {}, func() {}) {
		t.Fatal("a term whose context is live did not begin")
	}
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
	if !errors.Is(context.Cause(tm.ctx), ErrDeadlinePassed) || !errors.Is(tm.ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("cause %v, err %v", context.Cause(tm.ctx), tm.ctx.Err())
	}
}
