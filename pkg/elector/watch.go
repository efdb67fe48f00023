package elector

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// The Lease watch: one informer per client and namespace, shared by every running elector that uses that
// client in that namespace (a process running 1,000 electors on one client keeps one List and one watch,
// not 1,000), and stopped when the last of them stops. Each elector's observer receives the versions of
// its own Lease, by name, and records them on its own clock, so each elector's takeover timing is the one
// a watch of its Lease alone gives.
//
// The shared watch lists and watches the fenced Leases of the namespace (label
// fencing.fencekit.io/fenced=true, which every acquisition sets and fencekit's Lease policy lets nobody but
// break glass remove (runner.leftTheWatch), and whose other labels and annotations it bounds): other
// workloads' Leases, however many and however large, never reach the process. A Lease of the elector's name that is not fenced yet is not in it: the elector sees it when its
// Create of the Lease finds it there (a re-read), and then by compare-and-swap. The watch needs `list` and
// `watch` on Leases without resourceNames. A client whose RBAC names its Leases is refused that List: the electors waiting
// for it then each keep a watch of their own Lease by name (which RBAC authorizes against resourceNames),
// and say so in their log; an elector started later tries the shared watch again (RBAC may have changed).
var leaseWatches = struct {
	mu sync.Mutex
	m  map[watchKey]*leaseWatch
}{m: map[watchKey]*leaseWatch{}}

// fencedLeases selects the Leases the shared watch holds.
var fencedLeases = protocol.FencedLabel + "=true"

type watchKey struct {
	client    kubernetes.Interface
	namespace string
}

// leaseWatch is one shared informer on the Leases of a namespace.
type leaseWatch struct {
	// leases is the typed client of the namespace's Leases, which the electors subscribed send their
	// requests through (one, not one per elector).
	leases leaseClient
	store  cache.Store
	// synced is closed once the informer has listed the namespace; refused once its List was Forbidden.
	synced, refused chan struct{}
	refusal         error
	stop            context.CancelFunc
	refs            int // the electors subscribed, under leaseWatches.mu

	mu        sync.Mutex
	observers map[string][]*observer // by Lease name; a slice is replaced, never changed in place
}

// watchLease feeds o with the versions of its Lease in namespace ns, through the shared watch of cs when
// there is one, else through a watch of its own. It returns once o holds its first observation (false if
// ctx ended first), the client of the namespace's Leases to send the elector's requests through, and a
// function that ends the subscription.
func watchLease(ctx context.Context, cs kubernetes.Interface, ns string, o *observer, log logr.Logger) (leases leaseClient, stop func(), ok bool) {
	if !reflect.TypeOf(cs).Comparable() {
		leases = cs.CoordinationV1().Leases(ns)
		stop, ok = watchOwn(ctx, leases, o)
		return leases, stop, ok
	}
	key := watchKey{client: cs, namespace: ns}
	w := subscribe(key, o)
	unsubscribe := func() { w.unsubscribe(key, o) }
	select {
	case <-ctx.Done():
		unsubscribe()
		return nil, nil, false
	case <-w.synced:
	case <-w.refused:
		unsubscribe()
		log.Info("Watching the Lease by name: this client may not list the namespace's Leases, so its electors share no watch",
			"namespace", ns, "err", w.refusal.Error())
		stop, ok = watchOwn(ctx, w.leases, o)
		return w.leases, stop, ok
	}
	w.seed(ns, o)
	return w.leases, unsubscribe, true
}

// watchOwn runs o's own single-object watch until stop is called.
func watchOwn(ctx context.Context, leases leaseClient, o *observer) (stop func(), ok bool) {
	wctx, cancel := context.WithCancel(ctx)
	if !o.run(wctx, leases) {
		cancel()
		return nil, false
	}
	return cancel, true
}

// subscribe adds o to the shared watch of key, starting it if none runs.
func subscribe(key watchKey, o *observer) *leaseWatch {
	leaseWatches.mu.Lock()
	defer leaseWatches.mu.Unlock()
	w, ok := leaseWatches.m[key]
	if !ok {
		w = startLeaseWatch(key.client.CoordinationV1().Leases(key.namespace))
		leaseWatches.m[key] = w
	}
	w.refs++
	w.mu.Lock()
	w.observers[o.name] = append(slices.Clone(w.observers[o.name]), o)
	w.mu.Unlock()
	return w
}

// unsubscribe removes o; the last one out stops the informer.
func (w *leaseWatch) unsubscribe(key watchKey, o *observer) {
	w.mu.Lock()
	w.observers[o.name] = slices.DeleteFunc(slices.Clone(w.observers[o.name]), func(x *observer) bool { return x == o })
	if len(w.observers[o.name]) == 0 {
		delete(w.observers, o.name)
	}
	w.mu.Unlock()
	leaseWatches.mu.Lock()
	defer leaseWatches.mu.Unlock()
	if w.refs--; w.refs > 0 {
		return
	}
	w.stop()
	if leaseWatches.m[key] == w {
		delete(leaseWatches.m, key)
	}
}

func startLeaseWatch(leases leaseClient) *leaseWatch {
	w := &leaseWatch{leases: leases, synced: make(chan struct{}), refused: make(chan struct{}), observers: map[string][]*observer{}}
	var refuse sync.Once
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = fencedLeases
			list, err := leases.List(ctx, opts)
			if apierrors.IsForbidden(err) {
				refuse.Do(func() { w.refusal = err; close(w.refused) })
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = fencedLeases
			return leases.Watch(ctx, opts)
		},
	}
	store, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}),
		ObjectType:    &coordinationv1.Lease{},
		Transform:     w.transform,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.dispatch(obj, false) },
			UpdateFunc: func(_, obj any) { w.dispatch(obj, false) },
			DeleteFunc: func(obj any) { w.dispatch(obj, true) },
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	w.store, w.stop = store, cancel
	go informer.RunWithContext(ctx)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			close(w.synced)
		}
	}()
	return w
}

// transform trims a watched version of a Lease and shares with the version its elector holds what the two
// have equal (shareHeld), before the informer stores it.
func (w *leaseWatch) transform(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	w.mu.Lock()
	observers := w.observers[l.Name]
	w.mu.Unlock()
	if len(observers) > 0 {
		observers[0].adopt(l)
	} else {
		trim(l)
	}
	return l, nil
}

// dispatch hands a version (or the deletion) of a Lease to the observers of its name.
func (w *leaseWatch) dispatch(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	l := asLease(obj)
	if l == nil {
		return
	}
	w.mu.Lock()
	observers := w.observers[l.Name]
	w.mu.Unlock()
	for _, o := range observers {
		if deleted {
			o.deleted(l.ResourceVersion)
		} else {
			o.watched(l)
		}
	}
}

// seed gives o, subscribed to a synced watch, the version of its Lease the informer holds, or records the
// Lease absent, unless an event already reached o. A version the store returns after o saw a newer one is
// ignored by o (versions are ordered by resourceVersion).
func (w *leaseWatch) seed(ns string, o *observer) {
	obj, exists, err := w.store.GetByKey(ns + "/" + o.name)
	if err == nil && exists {
		o.watched(asLease(obj))
		return
	}
	o.absentIfUnseen()
}

// trim drops a Lease's managedFields, which the elector never reads (an acquisition resets them; a renewal
// sends none, and the apiserver keeps the stored ones): most of a Lease's size, kept once per Lease of the
// namespace. A Lease whose only label is the fenced label gets fencedLabels for its labels, one map that
// every such Lease the process keeps shares: a map costs over 300 bytes. A watched Lease is read only (the
// informer's store and the observer hold it); an elector writes a copy of it.
func trim(l *coordinationv1.Lease) {
	l.ManagedFields = nil
	if len(l.Labels) == 1 && l.Labels[protocol.FencedLabel] == fencedLabels[protocol.FencedLabel] {
		l.Labels = fencedLabels
	}
}

// fencedLabels is the labels of a Lease that carries the fenced label alone (trim). Never written.
var fencedLabels = map[string]string{protocol.FencedLabel: "true"}

// shareHeld makes l, a version of the Lease that nothing else holds yet (a watch event before the informer
// stores it, an answer to the elector's request), share with held, the version its elector holds, the
// name, namespace, uid and annotations map when they are equal. A renewal changes none of them, so the
// process keeps one annotations map per Lease, not one per version it holds: when the watch lags a
// renewal behind the answers (a busy apiserver), the informer's copy and the elector's are two versions.
// Both are read only from here on.
func shareHeld(l, held *coordinationv1.Lease) {
	if l == nil || held == nil || l == held || l.UID != held.UID || l.Name != held.Name || l.Namespace != held.Namespace {
		return
	}
	l.Name, l.Namespace, l.UID = held.Name, held.Namespace, held.UID
	if maps.Equal(l.Annotations, held.Annotations) {
		l.Annotations = held.Annotations
	}
}
