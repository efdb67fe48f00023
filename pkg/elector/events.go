package elector

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"unicode/utf8"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
)

// EventSource is the reporting controller of the Events the default recorder posts (events.k8s.io/v1).
const EventSource = "fencekit-elector"

// The default event recorder: one broadcaster per client, shared by every running elector that uses that
// client (a process running 100 electors on one client runs one broadcaster, not 100), and shut down when
// the last of them stops.
var broadcasters = struct {
	mu sync.Mutex
	m  map[kubernetes.Interface]*sharedBroadcaster
}{m: map[kubernetes.Interface]*sharedBroadcaster{}}

type sharedBroadcaster struct {
	rec  events.EventRecorder
	stop func()
	refs int
}

// defaultRecorder returns a recorder that posts Events through cs, and a function to call when done.
func defaultRecorder(cs kubernetes.Interface) (events.EventRecorder, func()) {
	if !reflect.TypeOf(cs).Comparable() {
		s := newBroadcaster(cs)
		return s.rec, s.stop
	}
	broadcasters.mu.Lock()
	defer broadcasters.mu.Unlock()
	s, ok := broadcasters.m[cs]
	if !ok {
		s = newBroadcaster(cs)
		broadcasters.m[cs] = s
	}
	s.refs++
	return s.rec, func() {
		broadcasters.mu.Lock()
		defer broadcasters.mu.Unlock()
		if s.refs--; s.refs == 0 {
			delete(broadcasters.m, cs)
			s.stop()
		}
	}
}

// newBroadcaster posts events.k8s.io/v1 Events through cs, fencekit's one Events API
// (k8s.io/client-go/tools/events, as controller-runtime's mgr.GetEventRecorder).
func newBroadcaster(cs kubernetes.Interface) *sharedBroadcaster {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		// Only fails when started twice; b is new.
		cancel()
		return &sharedBroadcaster{rec: &events.FakeRecorder{}, stop: func() {}}
	}
	return &sharedBroadcaster{rec: b.NewRecorder(scheme.Scheme, EventSource), stop: func() { b.Shutdown(); cancel() }}
}

// noteLimit is the longest Event note events.k8s.io/v1 accepts, in bytes: the apiserver refuses a longer
// Event, and the broadcaster drops it without retrying.
const noteLimit = 1024

// note formats an Event note and cuts it to noteLimit bytes at a UTF-8 boundary, ending "...", so that a
// long cause (a fence-on-acquire that failed on a hundred resources) still leaves its Event; the log keeps
// the whole text.
func note(format string, args ...any) string {
	s := fmt.Sprintf(format, args...)
	if len(s) <= noteLimit {
		return s
	}
	cut := noteLimit - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
