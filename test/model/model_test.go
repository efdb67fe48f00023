package model_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/model"
)

// TestModel runs the checks of the model that take seconds, as `make model` does (which runs the slow
// design checks too): the design must verify, each mutation and each residual must be refuted by spin
// with a trail that tells the story. The checks run in parallel (go test's -parallel, GOMAXPROCS by
// default), as make model runs them.
func TestModel(t *testing.T) {
	for _, c := range model.Checks {
		if c.Full || c.Slow {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			r, err := model.Run(t.Context(), c, model.Bound)
			if errors.Is(err, model.ErrNoSpin) {
				t.Fatal(err)
			}
			if err != nil {
				t.Fatalf("running spin: %v", err)
			}
			t.Logf("%d states, %d transitions, depth %d, %s", r.States, r.Transitions, r.Depth, r.Elapsed)
			switch {
			case !c.Refute && r.Violated:
				t.Fatalf("the design violates %s (%s):\n%s", r.Property, r.Assertion, strings.Join(r.Story, "\n"))
			case c.Refute && !r.Violated:
				t.Fatalf("%s: spin found no violation; want %s refuted", c.About, c.Property)
			case c.Refute && !r.OK():
				t.Fatalf("spin refuted %s (%s), want %s:\n%s", r.Property, r.Assertion, c.Property, strings.Join(r.Story, "\n"))
			case c.Refute && len(r.Story) == 0:
				t.Fatalf("the trail of %s tells no story", c.Name)
			}
		})
	}
}
