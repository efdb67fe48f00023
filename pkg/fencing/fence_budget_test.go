package fencing

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRaiseWithinTheBudget: raises the apiserver answers slowly (here: not before their context ends) are
// cut before the caller's deadline and left behind; they do not run on to it and fail the fence. A raise
// that fails on its own, within the budget, is an error.
func TestRaiseWithinTheBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	budget, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	refused := errors.New("refused")
	left, err := raiseWithin(ctx, budget, 40, func(ctx context.Context, i int) error {
		if i == 0 {
			return refused
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if left != 39 || !errors.Is(err, refused) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("left %d, error %v; want 39 left behind and only the refusal as the error", left, err)
	}
}
