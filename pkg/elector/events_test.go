package elector

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
)

// An Event note is cut to the 1024 bytes events.k8s.io/v1 accepts, at a UTF-8 boundary: a longer one is
// refused by the apiserver and the Event lost (a fence-on-acquire that failed on 100 resources did that).
func TestNoteLimit(t *testing.T) {
	if got := note("%s lost epoch %d", "a", 7); got != "a lost epoch 7" {
		t.Errorf("short note %q", got)
	}
	long := note("%s", strings.Repeat("é", 600)) // 1200 bytes, 2 per rune
	if len(long) > noteLimit || !strings.HasSuffix(long, "...") || !utf8.ValidString(long) {
		t.Errorf("long note: %d bytes, valid UTF-8 %v, ends %q", len(long), utf8.ValidString(long), long[len(long)-5:])
	}
	if exact := strings.Repeat("x", noteLimit); note("%s", exact) != exact {
		t.Errorf("a note of exactly %d bytes was cut", noteLimit)
	}
}

// The Events a broadcaster is handed go on in the order recorded, eventBurst at once and then
// eventsPerSecond (on the fake clock); flushing hands the rest on at once.
func TestPacedRecorder(t *testing.T) {
	fc := clocktesting.NewFakeClock(t0)
	inner := events.NewFakeRecorder(200)
	r := newPacedRecorder(inner, &countingSink{}, fc)
	const recorded = eventBurst + 10
	for i := range recorded {
		r.Eventf(nil, nil, "Normal", "Acquired", "Acquire", "event %d", i)
	}
	next := 0
	handedOn := func(n int) {
		t.Helper()
		for ; next < n; next++ {
			if got, want := <-inner.Events, fmt.Sprintf("Normal Acquired event %d", next); got != want {
				t.Fatalf("Event %d handed on as %q, want %q", next, got, want)
			}
		}
		// The pace holds the rest: the recorder waits on the clock, and nothing more was handed on.
		for !fc.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		select {
		case got := <-inner.Events:
			t.Fatalf("after %d Events, %q was handed on before its turn", n, got)
		default:
		}
	}
	handedOn(eventBurst)
	fc.Step(time.Second / eventsPerSecond)
	handedOn(eventBurst + 1)
	r.flush()
	for ; next < recorded; next++ {
		if got, want := <-inner.Events, fmt.Sprintf("Normal Acquired event %d", next); got != want {
			t.Fatalf("after the flush, Event %d handed on as %q, want %q", next, got, want)
		}
	}
	if r.sink.recorded != recorded {
		t.Errorf("counted %d Events recorded, want %d", r.sink.recorded, recorded)
	}
}
