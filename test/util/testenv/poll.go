package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// EventuallyTimeout is how long Eventually waits: generous, since no test asserts on wall-clock speed.
const EventuallyTimeout = 30 * time.Second

// Eventually polls cond every 20 ms until it holds, for at most EventuallyTimeout (the operator reconciles
// asynchronously), and fails the test if it never does; cond returns what it saw, for the failure message.
// It is the tests' one poller: a test waits for a condition with it, never with a loop of its own.
func Eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	EventuallyWithin(t, EventuallyTimeout, what, cond)
}

// EventuallyWithin is Eventually with another bound.
func EventuallyWithin(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		ok, got := cond()
		last = got
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: never happened in %v; last seen: %s", what, within, last)
	}
}

// ErrString is err's message, or "admitted" for nil: what a poll on a write reports.
func ErrString(err error) string {
	if err == nil {
		return "admitted"
	}
	return err.Error()
}
