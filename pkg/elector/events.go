package elector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
)

// EventSource is the reporting controller of the Events the default recorder posts (events.k8s.io/v1).
const EventSource = "fencekit-elector"

// The default event recorder: one poster per client, shared by every running elector that uses that
// client (a process running 100 electors on one client runs one poster, not 100), and stopped when the
// last of them stops.
var posters = struct {
	mu sync.Mutex
	m  map[kubernetes.Interface]*poster
}{m: map[kubernetes.Interface]*poster{}}

// defaultRecorder returns a recorder that posts Events through cs, and a function to call when done.
func defaultRecorder(cs kubernetes.Interface) (events.EventRecorder, func()) {
	if !reflect.TypeOf(cs).Comparable() {
		p := newPoster(cs)
		return p, p.stop
	}
	posters.mu.Lock()
	defer posters.mu.Unlock()
	p, ok := posters.m[cs]
	if !ok {
		p = newPoster(cs)
		posters.m[cs] = p
	}
	p.refs++
	return p, func() {
		posters.mu.Lock()
		defer posters.mu.Unlock()
		if p.refs--; p.refs == 0 {
			delete(posters.m, cs)
			p.stop()
		}
	}
}

// eventFlushTimeout bounds how long stopping a poster waits for the Events recorded on it to reach the
// apiserver: Run's last Event (Released) is recorded moments before Run returns, and a process often exits
// right after.
const eventFlushTimeout = 2 * time.Second

// maxPosting is how many Events a poster sends at once.
const maxPosting = 16

// maxEventTries and eventRetryWait are how often, and how far apart, a poster sends an Event again that did
// not reach the apiserver (a connection error, as client-go's event broadcaster does; an Event the
// apiserver refused is not sent again).
const (
	maxEventTries  = 12
	eventRetryWait = 10 * time.Second
)

// poster posts the electors' Events (events.k8s.io/v1, fencekit's one Events API) through one client, in
// the form client-go's event recorder gives them (k8s.io/client-go/tools/events: the name, the reporting
// controller and instance, the references): a queue that at most maxPosting goroutines drain, each ending
// when the queue is empty. client-go's broadcaster starts two goroutines for every Event and keeps each
// Event for 6 to 12 minutes to fold its repeats into a series; an elector's Events never repeat (each
// names its epoch), so a poster keeps an Event only until it is sent (decision 0066).
type poster struct {
	cs       kubernetes.Interface
	instance string
	ctx      context.Context
	cancel   context.CancelFunc
	refs     int // electors sharing it (posters.mu)

	mu      sync.Mutex
	queue   []*eventsv1.Event
	posting int // goroutines draining the queue
}

func newPoster(cs kubernetes.Interface) *poster {
	hostname, _ := os.Hostname()
	ctx, cancel := context.WithCancel(context.Background())
	return &poster{cs: cs, instance: EventSource + "-" + hostname, ctx: ctx, cancel: cancel}
}

var _ events.EventRecorder = (*poster)(nil)

// Eventf queues an Event about regarding (and related, if not nil) for posting.
func (p *poster) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ref, err := reference.GetReference(scheme.Scheme, regarding)
	if err != nil {
		klog.Background().Error(err, "Could not construct the reference of an Event; not posting it", "reason", reason)
		return
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		relatedRef, _ = reference.GetReference(scheme.Scheme, related)
	}
	now := time.Now()
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: namespace},
		EventTime:  metav1.NewMicroTime(now), ReportingController: EventSource, ReportingInstance: p.instance,
		Action: action, Reason: reason, Regarding: *ref, Related: relatedRef, Note: fmt.Sprintf(note, args...), Type: eventtype,
	}
	p.mu.Lock()
	p.queue = append(p.queue, ev)
	start := p.posting < maxPosting
	if start {
		p.posting++
	}
	p.mu.Unlock()
	if start {
		go p.drain()
	}
}

// drain posts the queued Events until the queue is empty.
func (p *poster) drain() {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.queue = nil // the array that held a burst
			p.posting--
			p.mu.Unlock()
			return
		}
		ev := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.mu.Unlock()
		p.send(ev)
	}
}

// send creates ev, again after a connection error, up to maxEventTries times or until the poster stops.
func (p *poster) send(ev *eventsv1.Event) {
	for try := 1; ; try++ {
		_, err := p.cs.EventsV1().Events(ev.Namespace).Create(p.ctx, ev, metav1.CreateOptions{})
		var status apierrors.APIStatus
		switch {
		case err == nil:
			return
		case errors.As(err, &status) || p.ctx.Err() != nil:
			klog.Background().V(2).Info("The apiserver refused an Event; not sending it again", "event", klog.KObj(ev), "reason", ev.Reason, "err", err)
			return
		case try == maxEventTries:
			klog.Background().Error(err, "Could not post an Event; giving up", "event", klog.KObj(ev), "reason", ev.Reason, "tries", try)
			return
		}
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(wait.Jitter(eventRetryWait, 0.25)):
		}
	}
}

// stop waits, up to eventFlushTimeout, until every Event recorded was sent (or given up), then cancels what
// is still being sent.
func (p *poster) stop() {
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, eventFlushTimeout, true, func(context.Context) (bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.posting == 0, nil
	})
	p.cancel()
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
