package fencing_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
)

const (
	writesPerPhase  = 250 // measured writes per phase and method; two phases per mode: 500 per mode
	warmupPerPhase  = 25
	concurrentN     = 8   // concurrent writers, each on its own FencedResource of the same Lease
	concurrentEach  = 100 // writes per concurrent writer per phase
	concurrentBurst = concurrentN * concurrentEach
)

// writeSamples are one mode's measurements.
type writeSamples struct {
	configMap               []time.Duration // per sequential merge patch of a plain ConfigMap: the baseline
	configMapTime           time.Duration
	patch, set, update      []time.Duration // per sequential write
	patchTime, setTime      time.Duration   // wall time of the sequential writes
	updateTime              time.Duration
	concurrentTime          time.Duration // wall time of the concurrent writes
	concurrentWrites, phase int
	// handlerTime and handlerCalls are the webhook handler's own time and calls during the sequential patches
	// (warm-up included).
	handlerTime  time.Duration
	handlerCalls uint64
}

// BenchmarkFencedWrite measures fenced writes by one holder against the same user's merge patch of a
// plain ConfigMap (the baseline: what the write costs without fencekit), in three modes:
//
//   - "cel-nooperator": the CRD's rule only (fencekit's ValidatingWebhookConfiguration deleted) and the
//     operator stopped, so nothing else writes the resource;
//   - "cel": the CRD's rule only, the operator's controllers running (they write status);
//   - "webhook": the full guarantee, the operator running and its webhook in effect.
//
// Phases run in the order A, B, C, then C, B, A (A = cel-nooperator, B = cel, C = webhook) so that a drift of
// the control plane over the run falls on every mode alike, and each phase writes the ConfigMap too: the ratios to the
// ConfigMap (p50 and sequential throughput) compare requests made within the same minutes.
//
// Three kinds of sequential write: "patch", one merge-patch request setting data, epoch and writer and
// presenting the token as its field manager (the write itself); "set", pkg/fencing's Writer.Set (one JSON
// patch without resourceVersion);
// and "update", pkg/fencing's Writer.Update (a GET and an UPDATE with the resourceVersion, retried on
// conflict). Set and Update write through clients of their own, which count their writes and conflicts.
func BenchmarkFencedWrite(b *testing.B) {
	stopOperator := operatortest.Start(b, env)
	ctx := b.Context()
	ns := env.Namespace(b)
	holder := newWorker(b, ns, "holder")
	// The holder's Lease declares fence-on-acquire for FencedResources, as an elector with
	// fencing.FenceOnAcquire does: the webhook decides its writes on its copy of the Lease.
	holder.Fences = protocol.Fences{FencedResources: true}
	tok := holder.Acquire(b, ns, "bench-writer", 1)
	setClient, setCount := countingClient(b, holder.Config)
	updateClient, updateCount := countingClient(b, holder.Config)
	w, wu := fencing.NewWriter(setClient), fencing.NewWriter(updateClient)
	keys := make([]types.NamespacedName, concurrentN)
	for i := range keys {
		keys[i] = declare(b, ns, fmt.Sprintf("bench-%d", i), "bench-writer")
		if _, err := w.Set(ctx, tok, keys[i], map[string]any{"seq": 0}); err != nil {
			b.Fatal(err)
		}
	}

	// The baseline: the same user's same small merge patch of a plain ConfigMap, what a user would write
	// without fencekit. It needs RBAC on ConfigMaps, which the fencekit-elector role does not grant.
	grantConfigMaps(b, ns, holder.User)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-baseline", Namespace: ns}}
	if err := env.Client.Create(ctx, cm); err != nil {
		b.Fatal(err)
	}
	cmKey := client.ObjectKeyFromObject(cm)

	seq := 0
	configMap := func(types.NamespacedName) error {
		seq++
		p := fmt.Sprintf(`{"data":{"seq":"%d","by":%q}}`, seq, tok.Holder)
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmKey.Name, Namespace: cmKey.Namespace}}
		return holder.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(p)))
	}
	patch := func(key types.NamespacedName) error {
		seq++
		fr := &fencingv1alpha1.FencedResource{}
		fr.Namespace, fr.Name = key.Namespace, key.Name
		p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"epoch":%d,"data":{"seq":%d,"by":%q}}}`,
			fencingv1alpha1.WriterAnnotation, tok.Holder, tok.Epoch, seq, tok.Holder)
		return holder.Client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(tok.FieldManager()))
	}
	set := func(key types.NamespacedName) error {
		seq++
		_, err := w.Set(ctx, tok, key, map[string]any{"seq": seq, "by": tok.Holder})
		return err
	}
	update := func(key types.NamespacedName) error {
		seq++
		_, err := wu.Update(ctx, tok, key, func(data map[string]any) error {
			data["seq"], data["by"] = seq, tok.Holder
			return nil
		})
		return err
	}
	sequential := func(write func(types.NamespacedName) error) ([]time.Duration, time.Duration) {
		for range warmupPerPhase {
			if err := write(keys[0]); err != nil {
				b.Fatal(err)
			}
		}
		ds := make([]time.Duration, 0, writesPerPhase)
		start := time.Now()
		for range writesPerPhase {
			t0 := time.Now()
			if err := write(keys[0]); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		return ds, time.Since(start)
	}
	concurrent := func(tok elector.Token) time.Duration {
		var wg sync.WaitGroup
		errs := make(chan error, concurrentN)
		start := time.Now()
		for i := range concurrentN {
			wg.Go(func() {
				fr := &fencingv1alpha1.FencedResource{}
				fr.Namespace, fr.Name = keys[i].Namespace, keys[i].Name
				for n := range concurrentEach {
					p := fmt.Sprintf(`{"spec":{"epoch":%d,"data":{"seq":%d,"by":%q}}}`, tok.Epoch, n, tok.Holder)
					if err := holder.Client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(tok.FieldManager())); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		return elapsed
	}

	for _, u := range []*updates{setCount, updateCount} {
		u.sent.Store(0)
		u.conflicts.Store(0)
	}
	type mode struct {
		name              string
		operator, webhook bool
	}
	modes := []mode{{"cel-nooperator", false, false}, {"cel", true, false}, {"webhook", true, true}}
	samples := map[string]*writeSamples{}
	for _, m := range modes {
		samples[m.name] = &writeSamples{}
	}
	running := true
	for _, i := range []int{0, 1, 2, 2, 1, 0} {
		m := modes[i]
		if m.webhook {
			setWebhook(b, true)
		}
		switch {
		case m.operator && !running:
			stopOperator, running = operatortest.Start(b, env), true
		case !m.operator && running:
			stopOperator()
			running = false
		}
		if !m.webhook {
			setWebhook(b, false)
		}
		s := samples[m.name]
		ds, d := sequential(configMap)
		s.configMap, s.configMapTime = append(s.configMap, ds...), s.configMapTime+d
		sum0, n0 := webhookHandlerTime(b)
		ds, d = sequential(patch)
		s.patch, s.patchTime = append(s.patch, ds...), s.patchTime+d
		sum1, n1 := webhookHandlerTime(b)
		s.handlerTime, s.handlerCalls = s.handlerTime+sum1-sum0, s.handlerCalls+n1-n0
		ds, d = sequential(set)
		s.set, s.setTime = append(s.set, ds...), s.setTime+d
		ds, d = sequential(update)
		s.update, s.updateTime = append(s.update, ds...), s.updateTime+d
		s.concurrentTime += concurrent(tok)
		s.concurrentWrites += concurrentBurst
		s.phase++
	}
	if !running {
		operatortest.Start(b, env)
	}
	setWebhook(b, true)

	rate := func(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
	// The baseline, over every phase: fencekit is off for a ConfigMap whatever the mode.
	var base []time.Duration
	var baseTime time.Duration
	for _, m := range modes {
		base, baseTime = append(base, samples[m.name].configMap...), baseTime+samples[m.name].configMapTime
	}
	b50, btput := ms(quantile(base, 0.5)), rate(len(base), baseTime)
	b.ReportMetric(b50, "configmap-p50-ms")
	b.ReportMetric(ms(quantile(base, 0.99)), "configmap-p99-ms")
	b.ReportMetric(btput, "configmap-writes/s")
	type figures struct{ p50, p99, tput, set50, set99, update50, update99, concurrent float64 }
	got := map[string]figures{}
	for _, m := range modes {
		s := samples[m.name]
		f := figures{
			p50: ms(quantile(s.patch, 0.5)), p99: ms(quantile(s.patch, 0.99)), tput: rate(len(s.patch), s.patchTime),
			set50: ms(quantile(s.set, 0.5)), set99: ms(quantile(s.set, 0.99)),
			update50: ms(quantile(s.update, 0.5)), update99: ms(quantile(s.update, 0.99)),
			concurrent: rate(s.concurrentWrites, s.concurrentTime),
		}
		got[m.name] = f
		b.ReportMetric(f.p50, m.name+"-p50-ms")
		b.ReportMetric(f.p99, m.name+"-p99-ms")
		b.ReportMetric(f.tput, m.name+"-writes/s")
		b.ReportMetric(f.set50, m.name+"-set-p50-ms")
		b.ReportMetric(f.set99, m.name+"-set-p99-ms")
		b.ReportMetric(rate(len(s.set), s.setTime), m.name+"-set-writes/s")
		b.ReportMetric(f.update50, m.name+"-update-p50-ms")
		b.ReportMetric(f.update99, m.name+"-update-p99-ms")
		b.ReportMetric(rate(len(s.update), s.updateTime), m.name+"-update-writes/s")
		b.ReportMetric(f.concurrent, m.name+"-concurrent8-writes/s")
		// The goal for the webhook mode: at most 1.5x the ConfigMap's p50, at least 60 % of
		// its sequential throughput.
		b.ReportMetric(f.p50/b50, m.name+"/configmap-p50-x")
		b.ReportMetric(100*f.tput/btput, m.name+"/configmap-writes-%")
		if s.handlerCalls > 0 {
			b.ReportMetric(ms(s.handlerTime)/float64(s.handlerCalls), m.name+"-webhook-handler-mean-ms")
			// More than one when kube-apiserver runs admission again for a write: its first attempt works on
			// its watch cache's copy of the object, and if that copy is stale the compare-and-swap fails.
			b.ReportMetric(float64(s.handlerCalls)/float64(s.phase*(writesPerPhase+warmupPerPhase)), m.name+"-webhook-calls/write")
		}
	}
	cel, wh, floor := got["cel"], got["webhook"], got["cel-nooperator"]
	// Writer.Set against the unfenced ConfigMap patch and against its floor, the same Set on the same CRD
	// (schema and CEL rule) with fencekit's webhook configuration deleted and the operator stopped.
	b.ReportMetric(wh.set50/b50, "webhook-set/configmap-p50-x")
	b.ReportMetric(wh.set99/ms(quantile(base, 0.99)), "webhook-set/configmap-p99-x")
	b.ReportMetric(wh.set50/floor.set50, "webhook-set/floor-set-p50-x")
	b.ReportMetric(wh.set99/floor.set99, "webhook-set/floor-set-p99-x")
	b.ReportMetric(floor.set50/b50, "floor-set/configmap-p50-x")
	b.ReportMetric(cel.p50/got["cel-nooperator"].p50, "cel/cel-nooperator-p50-x")
	b.ReportMetric(wh.p50-cel.p50, "added-p50-ms")
	b.ReportMetric(wh.p99-cel.p99, "added-p99-ms")
	b.ReportMetric(100*wh.tput/cel.tput, "webhook/cel-%")
	b.ReportMetric(wh.set50-cel.set50, "added-set-p50-ms")
	b.ReportMetric(wh.set99-cel.set99, "added-set-p99-ms")
	b.ReportMetric(wh.update50-cel.update50, "added-update-p50-ms")
	b.ReportMetric(wh.update99-cel.update99, "added-update-p99-ms")
	b.ReportMetric(100*wh.concurrent/cel.concurrent, "concurrent8-webhook/cel-%")
	// Per call of Set or Update, warm-up calls included (the counters run through them too).
	phases := 0
	for _, s := range samples {
		phases += s.phase
	}
	calls := float64(writesPerPhase+warmupPerPhase) * float64(phases)
	b.ReportMetric(float64(setCount.sent.Load())/calls, "set-writes/call")
	b.ReportMetric(float64(setCount.conflicts.Load())/calls, "set-conflicts/call")
	b.ReportMetric(float64(updateCount.sent.Load())/calls, "update-writes/call")
	b.ReportMetric(float64(updateCount.conflicts.Load())/calls, "update-conflicts/call")
	b.Logf("per mode: %d sequential patches, %d Writer.Set, %d Writer.Update, %d concurrent patches (%d writers), over %d phases",
		len(samples["webhook"].patch), len(samples["webhook"].set), len(samples["webhook"].update),
		samples["webhook"].concurrentWrites, concurrentN, samples["webhook"].phase)
}

// grantConfigMaps lets user get and patch ConfigMaps in ns and waits until the
// apiserver's authorizer allows it.
func grantConfigMaps(b *testing.B, ns, user string) {
	b.Helper()
	ctx := b.Context()
	env.Grant(b, ns, "bench-configmaps", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch"}}}, user)
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Resource: "configmaps"},
		}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	if err != nil {
		b.Fatalf("the ConfigMap binding of %s never took effect: %v", user, err)
	}
}

// webhookHandlerTime reads controller-runtime's histogram of the in-process webhook handler's latency (the
// handler's own time, from request decoded to response written, including its read of the Lease): total
// time and number of calls so far.
func webhookHandlerTime(b *testing.B) (time.Duration, uint64) {
	b.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	var n uint64
	for _, f := range families {
		if f.GetName() != "controller_runtime_webhook_latency_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "webhook" && l.GetValue() == "/validate-fencing-fencekit-io-v1alpha1-fencedresource" {
					sum += m.GetHistogram().GetSampleSum()
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return time.Duration(sum * float64(time.Second)), n
}
