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

// BenchmarkFencedWrite measures fenced writes by one holder with the CRD's rule only (fencekit's
// ValidatingWebhookConfiguration deleted) and with the webhook served by the operator in process. The
// operator's controllers run in both modes, so that only the webhook differs. Phases run A B B A (A = CEL
// only, B = webhook) so that a drift of the control plane over the run falls on both modes alike.
//
// Three kinds of sequential write: "patch", one merge-patch request setting data, epoch and writer and
// presenting the token as its field manager (the write itself); "set", pkg/fencing's Writer.Set (a GET, then one merge patch without resourceVersion);
// and "update", pkg/fencing's Writer.Update (a GET and an UPDATE with the resourceVersion, retried on
// conflict). Set and Update write through clients of their own, which count their writes and conflicts.
func BenchmarkFencedWrite(b *testing.B) {
	startOperator(b)
	ctx := b.Context()
	ns := env.Namespace(b)
	holder := newWorker(b, ns, "holder")
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
	samples := map[bool]*writeSamples{false: {}, true: {}}
	for _, webhook := range []bool{false, true, true, false} {
		setWebhook(b, webhook)
		s := samples[webhook]
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
	setWebhook(b, true)

	cel, wh := samples[false], samples[true]
	rate := func(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }
	report := func(prefix string, s *writeSamples) (p50, p99, tput float64) {
		p50, p99 = ms(quantile(s.patch, 0.5)), ms(quantile(s.patch, 0.99))
		tput = rate(len(s.patch), s.patchTime)
		b.ReportMetric(p50, prefix+"-p50-ms")
		b.ReportMetric(p99, prefix+"-p99-ms")
		b.ReportMetric(tput, prefix+"-writes/s")
		b.ReportMetric(ms(quantile(s.set, 0.5)), prefix+"-set-p50-ms")
		b.ReportMetric(ms(quantile(s.set, 0.99)), prefix+"-set-p99-ms")
		b.ReportMetric(rate(len(s.set), s.setTime), prefix+"-set-writes/s")
		b.ReportMetric(ms(quantile(s.update, 0.5)), prefix+"-update-p50-ms")
		b.ReportMetric(ms(quantile(s.update, 0.99)), prefix+"-update-p99-ms")
		b.ReportMetric(rate(len(s.update), s.updateTime), prefix+"-update-writes/s")
		b.ReportMetric(rate(s.concurrentWrites, s.concurrentTime), prefix+"-concurrent8-writes/s")
		return p50, p99, tput
	}
	c50, c99, ctput := report("cel", cel)
	w50, w99, wtput := report("webhook", wh)
	// The baseline, over both modes' phases: fencekit is off for a ConfigMap whatever the mode.
	base := append(append([]time.Duration(nil), cel.configMap...), wh.configMap...)
	b50, btput := ms(quantile(base, 0.5)), rate(len(base), cel.configMapTime+wh.configMapTime)
	b.ReportMetric(b50, "configmap-p50-ms")
	b.ReportMetric(ms(quantile(base, 0.99)), "configmap-p99-ms")
	b.ReportMetric(btput, "configmap-writes/s")
	b.ReportMetric(w50/b50, "webhook/configmap-p50-x")
	b.ReportMetric(100*wtput/btput, "webhook/configmap-writes-%")
	b.ReportMetric(c50/b50, "cel/configmap-p50-x")
	b.ReportMetric(w50-c50, "added-p50-ms")
	b.ReportMetric(w99-c99, "added-p99-ms")
	b.ReportMetric(100*wtput/ctput, "webhook/cel-%")
	if wh.handlerCalls > 0 {
		b.ReportMetric(ms(wh.handlerTime)/float64(wh.handlerCalls), "webhook-handler-mean-ms")
		// More than one when kube-apiserver runs admission again for a write: its first attempt works on
		// its watch cache's copy of the object, and if that copy is stale the compare-and-swap fails.
		b.ReportMetric(float64(wh.handlerCalls)/float64(wh.phase*(writesPerPhase+warmupPerPhase)), "webhook-calls/write")
	}
	b.ReportMetric(ms(quantile(wh.set, 0.5))-ms(quantile(cel.set, 0.5)), "added-set-p50-ms")
	b.ReportMetric(ms(quantile(wh.set, 0.99))-ms(quantile(cel.set, 0.99)), "added-set-p99-ms")
	b.ReportMetric(ms(quantile(wh.update, 0.5))-ms(quantile(cel.update, 0.5)), "added-update-p50-ms")
	b.ReportMetric(ms(quantile(wh.update, 0.99))-ms(quantile(cel.update, 0.99)), "added-update-p99-ms")
	b.ReportMetric(100*rate(wh.concurrentWrites, wh.concurrentTime)/rate(cel.concurrentWrites, cel.concurrentTime), "concurrent8-webhook/cel-%")
	// Per call of Set or Update, warm-up calls included (the counters run through them too).
	calls := float64(writesPerPhase+warmupPerPhase) * float64(cel.phase+wh.phase)
	b.ReportMetric(float64(setCount.sent.Load())/calls, "set-writes/call")
	b.ReportMetric(float64(setCount.conflicts.Load())/calls, "set-conflicts/call")
	b.ReportMetric(float64(updateCount.sent.Load())/calls, "update-writes/call")
	b.ReportMetric(float64(updateCount.conflicts.Load())/calls, "update-conflicts/call")
	b.Logf("per mode: %d sequential patches, %d Writer.Set, %d Writer.Update, %d concurrent patches (%d writers), over %d phases",
		len(cel.patch), len(cel.set), len(cel.update), cel.concurrentWrites, concurrentN, cel.phase)
}

// grantConfigMaps lets user get and patch ConfigMaps in ns and waits until the
// apiserver's authorizer allows it.
func grantConfigMaps(b *testing.B, ns, user string) {
	b.Helper()
	ctx := b.Context()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-configmaps", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch"}}},
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-configmaps", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	for _, o := range []client.Object{role, rb} {
		if err := env.Client.Create(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
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
