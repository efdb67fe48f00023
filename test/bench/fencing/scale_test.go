package fencing_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/operatortest"
)

// scaleWrites is the number of fenced writes (and ConfigMap writes) measured per point of the sweep.
const scaleWrites = 400

// BenchmarkFencedWriteSweep is a small part of the scale sweep: one holder leads L Leases
// (L in {1, 10, 100}) with R FencedResources bound to each (R in {1, 10}), and writes them with one
// goroutine per Lease, each writing its resources in turn, with the operator (one replica) and its webhook
// running: the full guarantee. The same goroutines then patch one ConfigMap each, the baseline. Reported
// per point: the fenced write's p50 and aggregate writes/s, their ratios to the ConfigMap's, webhook calls
// per write, the operator's status writes per fenced write and per resource (from a watch: an event that
// leaves the generation as it was) until every status caught up with the last write, and how long after
// the last write that took.
func BenchmarkFencedWriteSweep(b *testing.B) {
	operatortest.Start(b, env)
	setWebhook(b, true)
	for _, leases := range []int{1, 10, 100} {
		for _, perLease := range []int{1, 10} {
			b.Run(fmt.Sprintf("leases=%d/resources-per-lease=%d", leases, perLease), func(b *testing.B) {
				sweepPoint(b, leases, perLease)
			})
		}
	}
}

func sweepPoint(b *testing.B, leases, perLease int) {
	ctx := b.Context()
	ns := env.Namespace(b)
	holder := newWorker(b, ns, "holder")
	toks := make([]elector.Token, leases)
	keys := make([][]types.NamespacedName, leases)
	for l := range leases {
		toks[l] = holder.Acquire(b, ns, fmt.Sprintf("lease-%03d", l), 1)
		keys[l] = make([]types.NamespacedName, perLease)
	}
	workqueue.ParallelizeUntil(ctx, 8, leases*perLease, func(i int) {
		l, r := i/perLease, i%perLease
		fr := &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fr-%03d-%02d", l, r), Namespace: ns},
			Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: toks[l].Lease.Name},
		}
		if err := env.Client.Create(ctx, fr); err != nil {
			b.Error(err)
		}
		keys[l][r] = client.ObjectKeyFromObject(fr)
	})
	grantConfigMaps(b, ns, holder.User)
	for l := range leases {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", l), Namespace: ns}}
		if err := env.Client.Create(ctx, cm); err != nil {
			b.Fatal(err)
		}
	}
	if b.Failed() {
		b.FailNow()
	}

	// Every writer goroutine writes scaleWrites/leases times (at least 4), once as warm-up first.
	each := max(scaleWrites/leases, 4)
	run := func(write func(l, n int) error) ([]time.Duration, time.Duration) {
		var mu sync.Mutex
		var ds []time.Duration
		var wg sync.WaitGroup
		errs := make(chan error, leases)
		start := time.Now()
		for l := range leases {
			wg.Go(func() {
				local := make([]time.Duration, 0, each)
				for n := range each {
					t0 := time.Now()
					if err := write(l, n); err != nil {
						errs <- err
						return
					}
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				ds = append(ds, local...)
				mu.Unlock()
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return ds, elapsed
	}
	fenced := func(l, n int) error {
		tok := toks[l]
		key := keys[l][n%perLease]
		fr := &fencingv1alpha1.FencedResource{}
		fr.Namespace, fr.Name = key.Namespace, key.Name
		p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"epoch":%d,"data":{"seq":%d}}}`,
			fencingv1alpha1.WriterAnnotation, tok.Holder, tok.Epoch, n)
		return holder.Client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(tok.FieldManager()))
	}
	configMap := func(l, n int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", l), Namespace: ns}}
		return holder.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"seq":"%d"}}`, n))))
	}
	// Warm-up: every resource written once (its first status is written at once), every ConfigMap once.
	for l := range leases {
		for r := range perLease {
			if err := fenced(l, r); err != nil {
				b.Fatal(err)
			}
		}
		if err := configMap(l, 0); err != nil {
			b.Fatal(err)
		}
	}
	// The first statuses land outside the measured window: wait until every status has caught up.
	caughtUp(b, ns, leases*perLease)
	cm1, cmt1 := run(configMap)

	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &fencingv1alpha1.FencedResourceList{}, client.InNamespace(ns))
	if err != nil {
		b.Fatal(err)
	}
	var statusWrites atomic.Int64
	var mu sync.Mutex
	seen := map[string]string{} // resource name -> last resourceVersion seen on the watch
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		gen := map[string]int64{}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			o := ev.Object.(*fencingv1alpha1.FencedResource)
			if g, ok := gen[o.Name]; ok && g == o.Generation {
				statusWrites.Add(1)
			}
			gen[o.Name] = o.Generation
			mu.Lock()
			seen[o.Name] = o.ResourceVersion
			mu.Unlock()
		}
	}()
	_, calls0 := webhookHandlerTime(b)
	// n + perLease writes the same resources as the warm-up, with other data (a patch that changes nothing
	// does not raise the generation).
	fr1, frt1 := run(func(l, n int) error { return fenced(l, n+perLease) })
	_, calls1 := webhookHandlerTime(b)
	writesEnd := time.Now()
	final := caughtUp(b, ns, leases*perLease)
	catchUp := time.Since(writesEnd)
	// Count every status write up to the caught-up state: wait until the watch has delivered it.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for name, rv := range final {
			if seen[name] != rv {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		b.Fatalf("the watch never delivered the caught-up statuses: %v", err)
	}
	w.Stop()
	<-watched
	cm2, cmt2 := run(configMap)

	cmAll := slices.Concat(cm1, cm2)
	cmRate := float64(len(cmAll)) / (cmt1 + cmt2).Seconds()
	frRate := float64(len(fr1)) / frt1.Seconds()
	cm50, fr50 := ms(quantile(cmAll, 0.5)), ms(quantile(fr1, 0.5))
	b.ReportMetric(cm50, "configmap-p50-ms")
	b.ReportMetric(cmRate, "configmap-writes/s")
	b.ReportMetric(fr50, "webhook-p50-ms")
	b.ReportMetric(frRate, "webhook-writes/s")
	b.ReportMetric(fr50/cm50, "webhook/configmap-p50-x")
	b.ReportMetric(100*frRate/cmRate, "webhook/configmap-writes-%")
	b.ReportMetric(float64(calls1-calls0)/float64(len(fr1)), "webhook-calls/write")
	// The operator's status writes from the first fenced write until every status caught up with the last,
	// and how long after the last fenced write that took.
	b.ReportMetric(float64(statusWrites.Load())/float64(len(fr1)), "status-writes/write")
	b.ReportMetric(float64(statusWrites.Load())/float64(leases*perLease), "status-writes/resource")
	b.ReportMetric(ms(catchUp), "status-catch-up-ms")
}

// caughtUp waits until the n FencedResources in ns all have a status of their current generation, and
// returns their resourceVersions.
func caughtUp(b *testing.B, ns string, n int) map[string]string {
	b.Helper()
	rvs := map[string]string{}
	err := wait.PollUntilContextTimeout(b.Context(), 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list fencingv1alpha1.FencedResourceList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err
		}
		clear(rvs)
		for _, fr := range list.Items {
			if fr.Status.ObservedGeneration != fr.Generation {
				return false, nil
			}
			rvs[fr.Name] = fr.ResourceVersion
		}
		return len(list.Items) == n, nil
	})
	if err != nil {
		b.Fatalf("the statuses of %d FencedResources never caught up: %v", n, err)
	}
	return rvs
}
