package elector

import (
	"context"
	"reflect"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// The default event recorder: one broadcaster per client, shared by every running elector that uses that
// client (a process running 100 electors on one client runs one broadcaster, not 100), and shut down when
// the last of them stops.
var broadcasters = struct {
	mu sync.Mutex
	m  map[kubernetes.Interface]*sharedBroadcaster
}{m: map[kubernetes.Interface]*sharedBroadcaster{}}

type sharedBroadcaster struct {
	b    record.EventBroadcaster
	rec  record.EventRecorder
	refs int
}

// defaultRecorder returns a recorder that posts Events through cs, and a function to call when done.
func defaultRecorder(cs kubernetes.Interface) (record.EventRecorder, func()) {
	if !reflect.TypeOf(cs).Comparable() {
		s := newBroadcaster(cs)
		return s.rec, s.b.Shutdown
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
			s.b.Shutdown()
		}
	}
}

func newBroadcaster(cs kubernetes.Interface) *sharedBroadcaster {
	b := record.NewBroadcaster(record.WithContext(context.Background()))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	return &sharedBroadcaster{b: b, rec: b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "fencekit-elector"})}
}
