package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Object kinds in the observer's history.
const (
	KindLease          = "Lease"
	KindFencedResource = "FencedResource"
	KindConfigMap      = "ConfigMap"
	// KindGap marks a watch that had to relist: versions between two observed ones may be missing.
	KindGap = "Gap"
)

// Version is one version of a Lease or a target as the privileged observer's watch delivered it: the
// ground truth. ResourceVersions come from one etcd, so they order Leases and targets together.
type Version struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"` // namespace/name
	Event string `json:"event"`
	RV    int64  `json:"rv"`
	// At is when the observer received it (Unix nanoseconds): after the write was stored.
	At int64 `json:"at"`

	// A Lease's epoch annotation (0 for client-go's Leases), holder, acquirer annotation and
	// leaseTransitions.
	Holder      string `json:"holder,omitempty"`
	Acquirer    string `json:"acquirer,omitempty"`
	Transitions int64  `json:"transitions,omitempty"`

	// Value is a Lease's epoch, or what a target holds: a FencedResource's spec.epoch and data op, a
	// control ConfigMap's data epoch and op.
	Value Value `json:"value"`
	// Writer is a FencedResource's writer annotation or a ConfigMap's data writer.
	Writer string `json:"writer,omitempty"`
}

// ConfigMapValue is the epoch and op a control ConfigMap holds.
func ConfigMapValue(cm *corev1.ConfigMap) Value {
	e, _ := strconv.ParseInt(cm.Data["epoch"], 10, 64)
	return Value{Epoch: e, Op: cm.Data["op"]}
}

// Observer watches the Leases, FencedResources and ConfigMaps of a namespace as an admin and records
// every version it is delivered.
type Observer struct {
	c      client.WithWatch
	ns     string
	rec    *Recorder
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	// last is the last version seen per object, established when each watch (by list type) last started.
	last        map[string]Version
	established map[string]time.Time
}

// Observe starts watching namespace, appending Versions to path, until Stop.
func Observe(ctx context.Context, c client.WithWatch, namespace, path string) (*Observer, error) {
	rec, err := NewRecorder(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	o := &Observer{c: c, ns: namespace, rec: rec, cancel: cancel, last: map[string]Version{}, established: map[string]time.Time{}}
	lists := []client.ObjectList{&coordinationv1.LeaseList{}, &fencingv1alpha1.FencedResourceList{}, &corev1.ConfigMapList{}}
	for _, l := range lists {
		// Start from the current resourceVersion: the namespace is fresh, so nothing is missed.
		if err := c.List(ctx, l, client.InNamespace(namespace), client.Limit(1)); err != nil {
			cancel()
			return nil, fmt.Errorf("listing for the observer: %w", err)
		}
		rv := l.(metav1.ListInterface).GetResourceVersion()
		o.wg.Add(1)
		go o.watch(ctx, l, rv)
	}
	return o, nil
}

// Stop ends the watches, after letting them deliver for settle, and returns the first error.
func (o *Observer) Stop(settle time.Duration) error {
	time.Sleep(settle)
	o.cancel()
	o.wg.Wait()
	_ = o.rec.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (o *Observer) fail(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
}

func (o *Observer) watch(ctx context.Context, list client.ObjectList, rv string) {
	defer o.wg.Done()
	for ctx.Err() == nil {
		w, err := o.c.Watch(ctx, list, client.InNamespace(o.ns), &client.ListOptions{Raw: &metav1.ListOptions{
			ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		o.mu.Lock()
		o.established[fmt.Sprintf("%T", list)] = time.Now()
		o.mu.Unlock()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if ctx.Err() != nil {
					break // stopping
				}
				// Most likely "too old" (kube-apiserver restarted with a fresh watch cache): relist.
				w.Stop()
				rv = o.relist(ctx, list, rv)
				break
			}
			obj, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			rv = obj.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			if v, ok := versionOf(obj); ok {
				v.Event = string(ev.Type)
				v.At = time.Now().UnixNano()
				o.add(v)
			}
		}
		w.Stop()
	}
}

// relist lists the objects again after a watch could not resume, records their versions and returns the
// list's resourceVersion. Versions stored while nobody watched are lost to the observer: if an object's
// state (epoch, op, writer, holder, acquirer) differs from the last version seen, or the object is new,
// a Gap says so, and the checker calls the history inconclusive. An unchanged object lost nothing that
// the checker reads.
func (o *Observer) relist(ctx context.Context, list client.ObjectList, rv string) string {
	fresh := list.DeepCopyObject().(client.ObjectList)
	if err := o.c.List(ctx, fresh, client.InNamespace(o.ns)); err != nil {
		o.add(Version{Kind: KindGap, Name: fmt.Sprintf("%T", list), At: time.Now().UnixNano()})
		return rv
	}
	items, _ := meta.ExtractList(fresh)
	for _, item := range items {
		obj, ok := item.(client.Object)
		if !ok {
			continue
		}
		v, ok := versionOf(obj)
		if !ok {
			continue
		}
		v.Event, v.At = "RELIST", time.Now().UnixNano()
		o.mu.Lock()
		prev, seen := o.last[v.Kind+"/"+v.Name]
		o.mu.Unlock()
		if !seen || prev.RV != v.RV && !sameState(prev, v) {
			o.add(Version{Kind: KindGap, Name: v.Name, RV: v.RV, At: v.At})
		}
		o.add(v)
	}
	return fresh.(metav1.ListInterface).GetResourceVersion()
}

func sameState(a, b Version) bool {
	return a.Value == b.Value && a.Writer == b.Writer && a.Holder == b.Holder && a.Acquirer == b.Acquirer && a.Transitions == b.Transitions
}

// WatchingSince reports whether every watch has (re)started after t.
func (o *Observer) WatchingSince(t time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, at := range o.established {
		if at.Before(t) {
			return false
		}
	}
	return len(o.established) == 3
}

func (o *Observer) add(v Version) {
	if v.Kind != KindGap {
		o.mu.Lock()
		o.last[v.Kind+"/"+v.Name] = v
		o.mu.Unlock()
	}
	if err := o.rec.Add(v); err != nil {
		o.fail(err)
	}
}

func versionOf(obj client.Object) (Version, bool) {
	rv, err := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return Version{}, false
	}
	v := Version{Name: obj.GetNamespace() + "/" + obj.GetName(), RV: rv}
	switch o := obj.(type) {
	case *coordinationv1.Lease:
		v.Kind = KindLease
		v.Holder = ptr.Deref(o.Spec.HolderIdentity, "")
		v.Acquirer = o.Annotations[protocol.AcquirerAnnotation]
		v.Transitions = int64(ptr.Deref(o.Spec.LeaseTransitions, 0))
		v.Value.Epoch, _ = strconv.ParseInt(o.Annotations[protocol.EpochAnnotation], 10, 64)
	case *fencingv1alpha1.FencedResource:
		v.Kind = KindFencedResource
		v.Value.Epoch = o.Spec.FencedEpoch()
		v.Writer = o.Annotations[fencingv1alpha1.WriterAnnotation]
		if o.Spec.Data != nil {
			var d struct {
				Op string `json:"op"`
			}
			_ = json.Unmarshal(o.Spec.Data.Raw, &d)
			v.Value.Op = d.Op
		}
	case *corev1.ConfigMap:
		if o.Name == "kube-root-ca.crt" {
			return Version{}, false
		}
		v.Kind = KindConfigMap
		v.Value = ConfigMapValue(o)
		v.Writer = o.Data["writer"]
	default:
		return Version{}, false
	}
	return v, true
}
