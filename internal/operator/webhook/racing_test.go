package webhook

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencekit/fencekit/internal/operator/admission"
)

// The record of the writes presenting a token: a write without the token that read the same stored object
// sees the epoch while the token's write is being decided, and for racingAfterAdmission after its
// admission if it changes the object; not after a refusal, a write that changes nothing, or once the
// object's resourceVersion has moved on.
func TestRacingRecordsTheTokensWritesOnTheObjectTheyRead(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	rc := newRacing(clock)
	object := func(rv, label string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "cm", "namespace": "ns", "uid": "u1", "resourceVersion": rv}}}
		if label != "" {
			u.SetLabels(map[string]string{"x": label})
		}
		return u
	}
	write := func(manager, rv, label string) *admission.Request {
		r := &admission.Request{Class: admission.Object, Operation: admission.Update, FieldManager: manager,
			Old: object(rv, ""), New: object(rv, label)}
		r.Complete()
		return r
	}
	free := write("kubectl", "10", "free")
	check := func(step string, want int64) {
		t.Helper()
		if got := rc.epoch(free); got != want {
			t.Errorf("%s: a write without the token on resourceVersion 10 sees epoch %d, want %d", step, got, want)
		}
	}
	check("nothing recorded", 0)

	done := rc.begin(write("fencing.fencekit.io/epoch=3", "10", "token"))
	check("while the token's write is decided", 3)
	if got := rc.epoch(write("kubectl", "11", "free")); got != 0 {
		t.Errorf("a write on another resourceVersion sees epoch %d, want 0", got)
	}
	done(false)
	check("after the token's write was refused", 0)

	done = rc.begin(write("fencing.fencekit.io/epoch=3", "10", "token"))
	done(true)
	check("just after the token's write was admitted", 3)
	clock.SetTime(clock.Now().Add(racingAfterAdmission - time.Millisecond))
	check("a moment after the admission", 3)
	clock.SetTime(clock.Now().Add(time.Millisecond))
	check("racingAfterAdmission after the admission", 0)

	done = rc.begin(write("fencing.fencekit.io/epoch=3", "10", ""))
	done(true)
	check("after an admitted write that changes nothing", 0)

	older := rc.begin(write("fencing.fencekit.io/epoch=2", "10", "stale"))
	newer := rc.begin(write("fencing.fencekit.io/epoch=3", "10", "token"))
	check("while two tokens' writes are decided", 3)
	newer(false)
	check("while the older one is still decided", 3)
	older(false)
	check("after both were refused", 0)
	if len(rc.m) != 0 {
		t.Errorf("%d records left after every decision ended, want none", len(rc.m))
	}

	if done := rc.begin(write("kubectl", "10", "free")); rc.epoch(free) != 0 {
		t.Errorf("a write without the token was recorded as presenting one")
		done(false)
	}
}
