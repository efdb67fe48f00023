package elector

import (
	"context"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// observer keeps the latest version of the one Lease, fed by the process's shared watch of the Lease's
// namespace (watch.go) or a single-object watch of its own (an informer with a metadata.name field
// selector), each re-established on error, and by the elector's own writes and reads. It records the
// candidate's own monotonic clock reading when it first saw each version.
type observer struct {
	name  string
	clock clock.PassiveClock

	mu  sync.Mutex
	cur observation
	rv  int64 // resourceVersion of cur (or of the deletion), 0 if unknown
	// notify has a value when cur changed since the loop last looked.
	notify chan struct{}
}

func newObserver(name string, clk clock.PassiveClock) *observer {
	return &observer{name: name, clock: clk, notify: make(chan struct{}, 1)}
}

// get returns the latest observation.
func (o *observer) get() observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cur
}

// adopt readies l, a version of the Lease that nothing else holds yet (a watch event before the informer
// stores it, an answer to the elector's request), to be kept: trimmed, and sharing with the version held
// what the two have equal.
func (o *observer) adopt(l *coordinationv1.Lease) {
	trim(l)
	shareHeld(l, o.get().lease)
}

// set records a version of the Lease if it is newer than the one held. Versions are ordered by
// resourceVersion (comparable integers on Kubernetes >= 1.35), so a watch event that arrives after the
// elector's own write of a later version does not roll the view back. l is kept, not copied: the watch's
// version (trim, shareHeld) or the answer to one of the elector's requests (leaseRequests).
func (o *observer) set(l *coordinationv1.Lease) {
	if l == nil || l.Name != o.name {
		return
	}
	rv, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	o.mu.Lock()
	defer o.mu.Unlock()
	// A version at the resourceVersion of a recorded deletion is that version leaving a label-selected watch
	// (its fenced label removed), which a read then shows: the Lease exists.
	if err == nil && (rv < o.rv || rv == o.rv && o.cur.lease != nil) {
		return
	}
	if err != nil && o.cur.lease != nil && o.cur.lease.ResourceVersion == l.ResourceVersion {
		return
	}
	if err == nil {
		o.rv = rv
	}
	if o.cur.lease != nil && sameTerm(o.cur.lease, l) {
		// A write that renews nothing (a label, a finalizer) does not restart the standby's wait: the
		// holder's renewals are what it times (TestRound8LabelWritesKeepADeadHolderLeading).
		o.cur.lease = l
		return
	}
	o.cur = observation{lease: l, at: o.clock.Now()}
	o.signal()
}

// watched is set for a version the watch delivered. At a resourceVersion already recorded (the answer to
// the elector's own write, which the watch delivers a moment later) the watch's copy replaces the recorded
// one, the time it was first seen unchanged, and the loop is woken to take it as the base of its next
// write (runner.checkObserved): the informer holds that copy anyway, and the elector then keeps no second
// one of the same version while it waits for its next renewal.
func (o *observer) watched(l *coordinationv1.Lease) {
	if o.replaceCopy(l) {
		return
	}
	o.set(l)
}

// replaceCopy puts l in place of the recorded version if it is another copy of it, and wakes the loop.
func (o *observer) replaceCopy(l *coordinationv1.Lease) bool {
	if l == nil || l.Name != o.name {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur.lease == nil || o.cur.lease == l || o.cur.lease.ResourceVersion != l.ResourceVersion {
		return false
	}
	o.cur.lease = l
	o.signal()
	return true
}

// sameTerm reports whether b shows the same holder, epoch, renewal and lease duration as a: a version of
// the Lease that neither renews, releases nor acquires it.
func sameTerm(a, b *coordinationv1.Lease) bool {
	return holder(a) == holder(b) && a.Annotations[protocol.EpochAnnotation] == b.Annotations[protocol.EpochAnnotation] &&
		a.Spec.RenewTime.Equal(b.Spec.RenewTime) && a.Spec.AcquireTime.Equal(b.Spec.AcquireTime) &&
		ptr.Equal(a.Spec.LeaseDurationSeconds, b.Spec.LeaseDurationSeconds)
}

// deleted records that the Lease is gone. rv is the deletion's resourceVersion ("" if unknown, e.g. from a
// fresh read that returned NotFound, which is always current).
func (o *observer) deleted(rv string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if v, err := strconv.ParseInt(rv, 10, 64); err == nil {
		if v < o.rv {
			return
		}
		o.rv = v
	}
	if o.cur.lease == nil && !o.cur.at.IsZero() {
		return
	}
	o.cur = observation{at: o.clock.Now()}
	o.signal()
}

func (o *observer) signal() {
	select {
	case o.notify <- struct{}{}:
	default:
	}
}

// run starts a single-object informer of its own and returns once it has synced (false if ctx ended
// first). The informer stops with ctx.
func (o *observer) run(ctx context.Context, leases leaseClient) bool {
	selector := fields.OneTermEqualSelector("metadata.name", o.name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return leases.Watch(ctx, opts)
		},
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		// A plain List (of at most one object) then a Watch from its resourceVersion; the streaming
		// watch-list brings nothing for one object and is not implemented by client-go's fake clients.
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}),
		ObjectType:    &coordinationv1.Lease{},
		Transform: func(obj any) (any, error) {
			if l := asLease(obj); l != nil {
				o.adopt(l)
			}
			return obj, nil
		},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.watched(asLease(obj)) },
			UpdateFunc: func(_, obj any) { o.watched(asLease(obj)) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				if l := asLease(obj); l != nil && l.Name == o.name {
					o.deleted(l.ResourceVersion)
				}
			},
		},
	})
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return false
	}
	// Nothing added during the initial list: the Lease does not exist.
	o.absentIfUnseen()
	return true
}

// absentIfUnseen records the Lease absent if o has observed nothing yet: the watch has listed the Lease's
// namespace (or name) and found no such Lease.
func (o *observer) absentIfUnseen() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.cur.at.IsZero() {
		o.cur = observation{at: o.clock.Now()}
		o.signal()
	}
}

func asLease(obj any) *coordinationv1.Lease {
	l, _ := obj.(*coordinationv1.Lease)
	return l
}

// noWatchList tells the reflector not to use the streaming watch-list.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }
