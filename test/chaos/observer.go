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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
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
}

// Observe starts watching namespace, appending Versions to path, until Stop.
func Observe(ctx context.Context, c client.WithWatch, namespace, path string) (*Observer, error) {
	rec, err := NewRecorder(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	o := &Observer{c: c, ns: namespace, rec: rec, cancel: cancel}
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
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				if ctx.Err() != nil {
					break // stopping
				}
				// Most likely "too old": relist from now, and say that something may be missing.
				w.Stop()
				fresh := list.DeepCopyObject().(client.ObjectList)
				if err := o.c.List(ctx, fresh, client.InNamespace(o.ns), client.Limit(1)); err == nil {
					rv = fresh.(metav1.ListInterface).GetResourceVersion()
				}
				o.add(Version{Kind: KindGap, Name: fmt.Sprintf("%T", list), At: time.Now().UnixNano()})
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

func (o *Observer) add(v Version) {
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
		v.Acquirer = o.Annotations[elector.AcquirerAnnotation]
		v.Transitions = int64(ptr.Deref(o.Spec.LeaseTransitions, 0))
		v.Value.Epoch, _ = strconv.ParseInt(o.Annotations[elector.EpochAnnotation], 10, 64)
	case *fencingv1alpha1.FencedResource:
		v.Kind = KindFencedResource
		v.Value.Epoch = o.Spec.Epoch
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
