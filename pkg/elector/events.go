package elector

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unicode/utf8"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
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

// eventFlushTimeout bounds how long stopping a broadcaster waits for the Events recorded on it to reach
// the apiserver: Run's last Event (Released) is recorded moments before Run returns, and a process often
// exits right after.
const eventFlushTimeout = 2 * time.Second

// newBroadcaster posts events.k8s.io/v1 Events through cs, fencekit's one Events API
// (k8s.io/client-go/tools/events, as controller-runtime's mgr.GetEventRecorder). Its stop waits, up to
// eventFlushTimeout, until every Event recorded on it was sent; client-go's broadcaster alone would cancel
// a post still under way.
func newBroadcaster(cs kubernetes.Interface) *sharedBroadcaster {
	sink := &countingSink{EventSink: &events.EventSinkImpl{Interface: cs.EventsV1()}}
	b := events.NewBroadcaster(sink)
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		// Only fails when started twice; b is new.
		cancel()
		return &sharedBroadcaster{rec: &events.FakeRecorder{}, stop: func() {}}
	}
	rec := &countingRecorder{EventRecorder: b.NewRecorder(scheme.Scheme, EventSource), sink: sink}
	return &sharedBroadcaster{rec: rec, stop: func() {
		// Before Shutdown: the recorder hands each Event to the broadcaster from a goroutine of its own,
		// and a broadcaster shut down drops what it is handed.
		sink.waitSent(eventFlushTimeout)
		b.Shutdown()
		cancel()
	}}
}

// countingRecorder counts the Events recorded on the broadcaster, for countingSink.waitSent.
type countingRecorder struct {
	events.EventRecorder
	sink *countingSink
}

func (r *countingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	r.sink.mu.Lock()
	r.sink.recorded++
	r.sink.mu.Unlock()
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// countingSink counts the Events sent to the apiserver (created or patched, whatever the reply), so that
// stopping the broadcaster can wait until every recorded Event was sent. An Event the broadcaster folds
// into a series it already patched once sends nothing: waitSent then waits its whole timeout.
type countingSink struct {
	events.EventSink
	mu             sync.Mutex
	recorded, sent int
}

func (s *countingSink) countSent() {
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
}

func (s *countingSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	defer s.countSent()
	return s.EventSink.Create(ctx, ev)
}

func (s *countingSink) Patch(ctx context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	defer s.countSent()
	return s.EventSink.Patch(ctx, ev, data)
}

// waitSent waits until as many Events were sent as were recorded, or timeout passed. It runs once, when
// the last elector on the broadcaster stops.
func (s *countingSink) waitSent(timeout time.Duration) {
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.sent >= s.recorded, nil
	})
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
