package elector

import (
	"context"
	"reflect"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// leaderships orders, within one process, the leaderships of one Lease among the electors whose clients
// talk to one apiserver address: an elector starts leading (IsLeader, is_leader, OnStartedLeading) only once the previous
// leadership of that Lease in the process has ended (endTerm: OnStartedLeading returned or ReleaseTimeout
// passed, is_leader lowered). Two electors of a process learn of a third party's deletion of their Lease
// from one watch event: the holder steps down while the other creates the Lease, and without this the
// other's OnStartedLeading could start before the holder's returned. Across processes the fencing token
// orders the writes; electors of one process that reach one Lease by two addresses are not ordered.
var leaderships = struct {
	mu sync.Mutex
	m  map[leadershipKey]chan struct{} // closed when that leadership ends
}{m: map[leadershipKey]chan struct{}{}}

type leadershipKey struct {
	// server is the address of the apiserver the client talks to; client is the client itself when it has
	// none (a fake clientset).
	server          string
	client          kubernetes.Interface
	namespace, name string
}

// leadershipKeyOf keys the Lease ns/name as reached through cs; false if cs has no address and cannot key
// a map.
func leadershipKeyOf(cs kubernetes.Interface, ns, name string) (leadershipKey, bool) {
	if rc, ok := cs.CoordinationV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		u := rc.Get().URL()
		u.RawQuery = ""
		return leadershipKey{server: u.String(), namespace: ns, name: name}, true
	}
	if !reflect.TypeOf(cs).Comparable() {
		return leadershipKey{}, false
	}
	return leadershipKey{client: cs, namespace: ns, name: name}, true
}

// takeLeadership waits until no other elector of the process leads the Lease of key, then takes it. It
// returns the function that gives it back (which may be called more than once), or false if ctx ended
// first.
func takeLeadership(ctx context.Context, key leadershipKey) (giveBack func(), ok bool) {
	for {
		leaderships.mu.Lock()
		busy, taken := leaderships.m[key]
		if !taken && ctx.Err() == nil {
			ended := make(chan struct{})
			leaderships.m[key] = ended
			leaderships.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					leaderships.mu.Lock()
					delete(leaderships.m, key)
					leaderships.mu.Unlock()
					close(ended)
				})
			}, true
		}
		leaderships.mu.Unlock()
		if !taken {
			return nil, false
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, false
		}
	}
}
