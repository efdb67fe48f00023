package elector

import (
	"context"
	"reflect"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// leaderships orders, within one process, the leaderships of one Lease among the electors whose clients
// talk to one apiserver address: an elector starts leading (IsLeader, is_leader, OnStartedLeading) only
// once the previous leadership of that Lease in the process has ended (endTerm: OnStartedLeading returned
// or ReleaseTimeout passed, is_leader lowered). Two electors of a process learn of a third party's
// deletion of their Lease from one watch event: the holder steps down while the other creates the Lease,
// and without this the other's OnStartedLeading could start before the holder's returned. Across
// processes the fencing token orders the writes; electors of one process that reach one Lease by two
// addresses are not ordered.
//
// The wait is bounded by when the previous leadership must have ended if the Lease is taken from it: its
// safe-work deadline as the wait begins (a holder whose Lease was taken cannot renew, so its deadline no
// longer moves) plus its ReleaseTimeout. A leadership that outlasts that bound is of another Lease under
// the same key (two clusters behind one address, which a gateway that routes by credentials makes), or
// one whose OnStartedLeading ignores its context: the waiting elector then leads beside it rather than
// not at all.
var leaderships = struct {
	mu sync.Mutex
	m  map[leadershipKey]*leadership
}{m: map[leadershipKey]*leadership{}}

type leadershipKey struct {
	// server is the address of the apiserver the client talks to; client is the client itself when it has
	// none (a fake clientset).
	server          string
	client          kubernetes.Interface
	namespace, name string
}

// leadership is one elector's leadership of a Lease in the process.
type leadership struct {
	ended chan struct{} // closed when it is given back
	// endsBy is the latest it can last once its Lease is taken: its safe-work deadline now plus its
	// ReleaseTimeout.
	endsBy func() time.Time
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

// takeLeadership waits until no other elector of the process leads the Lease of key, or until the one that
// does has outlasted its bound (endsBy, on clk), then takes it with mine as its own bound. It returns the
// function that gives it back (which may be called more than once), beside whether it waited out another
// leadership's bound instead (the caller says so), or ok false if ctx ended first.
func takeLeadership(ctx context.Context, clk clock.Clock, key leadershipKey, mine func() time.Time) (giveBack func(), outlasted *leadership, ok bool) {
	for {
		leaderships.mu.Lock()
		busy := leaderships.m[key]
		if ctx.Err() != nil {
			leaderships.mu.Unlock()
			return nil, nil, false
		}
		if busy == nil || busy == outlasted {
			l := &leadership{ended: make(chan struct{}), endsBy: mine}
			leaderships.m[key] = l
			leaderships.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					leaderships.mu.Lock()
					if leaderships.m[key] == l {
						delete(leaderships.m, key)
					}
					leaderships.mu.Unlock()
					close(l.ended)
				})
			}, outlasted, true
		}
		leaderships.mu.Unlock()
		timer := clk.NewTimer(busy.endsBy().Sub(clk.Now()))
		select {
		case <-busy.ended:
		case <-timer.C():
			outlasted = busy
		case <-ctx.Done():
		}
		timer.Stop()
	}
}
