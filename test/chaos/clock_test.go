package chaos

import (
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestScaledClock: the clock advances by its rate times the base time that passed, its timers fire and
// re-arm after their duration at that rate, and a rate of 0 is ignored.
func TestScaledClock(t *testing.T) {
	base := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	start := base.Now()
	c := NewScaledClock(base)

	base.Step(2 * time.Second)
	if got := c.Since(start); got != 2*time.Second {
		t.Fatalf("at rate 1, 2s of base time: the clock advanced %v, want 2s", got)
	}
	c.SetRate(0.5)
	base.Step(2 * time.Second)
	if got := c.Since(start); got != 3*time.Second {
		t.Fatalf("then 2s at rate 0.5: the clock advanced %v in all, want 3s", got)
	}
	c.SetRate(2)
	base.Step(time.Second)
	if got := c.Since(start); got != 5*time.Second {
		t.Fatalf("then 1s at rate 2: the clock advanced %v in all, want 5s", got)
	}

	// A timer of 1s on the clock at rate 2 fires after 500ms of base time, not before.
	timer := c.NewTimer(time.Second)
	base.Step(499 * time.Millisecond)
	expectFired(t, timer, false, "a 1s timer at rate 2, after 499ms of base time")
	base.Step(time.Millisecond)
	expectFired(t, timer, true, "a 1s timer at rate 2, after 500ms of base time")

	// At rate 0.5, Reset(1s) re-arms for 2s of base time.
	c.SetRate(0.5)
	timer.Reset(time.Second)
	base.Step(1999 * time.Millisecond)
	expectFired(t, timer, false, "a timer reset to 1s at rate 0.5, after 1.999s of base time")
	base.Step(time.Millisecond)
	expectFired(t, timer, true, "a timer reset to 1s at rate 0.5, after 2s of base time")

	c.SetRate(0)
	if c.Rate() != 0.5 {
		t.Fatalf("SetRate(0) changed the rate to %v; it must be ignored", c.Rate())
	}
}

// expectFired fails t unless timer has fired (want) or has not (!want), without waiting.
func expectFired(t *testing.T, timer clock.Timer, want bool, what string) {
	t.Helper()
	select {
	case <-timer.C():
		if !want {
			t.Fatalf("%s: fired, want not yet", what)
		}
	default:
		if want {
			t.Fatalf("%s: not fired, want fired", what)
		}
	}
}
