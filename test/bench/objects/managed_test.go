package objects_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/managed"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// BenchmarkManagedFenceWrite is a controller-runtime operator fenced with managed.NewManager and nothing
// else: no PostAcquire set, so managed.Fence's default fences the declared objects on acquisition and
// declares it on the Lease. A leader-only runnable patches one ConfigMap (declared by a FencingPolicy)
// through mgr.GetClient(), sequentially. It reports the patch's p50 and p99 in ms and how fencekit's object
// webhook decided those writes: on its watch-fed copy of the Lease or with a quorum read
// (fencekit_webhook_lease_reads_total{webhook="objects"}, source "cache" or "apiserver"), and the share
// decided on the copy.
func BenchmarkManagedFenceWrite(b *testing.B) {
	operatortest.Start(b, env)
	ctx := b.Context()
	ns := env.Namespace(b)
	const user = "operator-user"
	_, cfg := env.ElectorClient(b, ns, user)
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 1000 // client-go's default (5 requests/s) would measure itself
	grant(b, ns, user)
	policy := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "my-operator"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "my-operator", Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps"}}}}
	if err := env.Client.Create(ctx, policy); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, "the policy is enforced", func() (bool, string) {
		err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}, client.DryRunAll)
		return fencing.IsTokenMissing(err), fmt.Sprint(err)
	})

	mgr, err := managed.NewManager(cfg, manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"},
		elector.Config{Namespace: ns, Name: "my-operator", Identity: "my-operator-0"})
	if err != nil {
		b.Fatal(err)
	}
	type result struct {
		ds            []time.Duration
		cache, quorum float64
		fences        string
		err           error
	}
	done := make(chan result, 1)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		c := mgr.GetClient()
		r := result{}
		defer func() { done <- r }()
		if r.err = c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rendered"}, Data: map[string]string{"seq": "0"}}); r.err != nil {
			return nil
		}
		for i := range warmup + 400 {
			if i == warmup {
				r.cache, r.quorum = -leaseReads(b, "cache"), -leaseReads(b, "apiserver")
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rendered"}}
			start := time.Now()
			if r.err = c.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"data":{"seq":"%d"}}`, i))); r.err != nil {
				return nil
			}
			if i >= warmup {
				r.ds = append(r.ds, time.Since(start))
			}
		}
		r.cache, r.quorum = r.cache+leaseReads(b, "cache"), r.quorum+leaseReads(b, "apiserver")
		var lease coordinationv1.Lease
		r.err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "my-operator"}, &lease)
		r.fences = lease.Annotations[protocol.FencesAnnotation]
		return nil
	})); err != nil {
		b.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(mctx) }()
	defer func() { cancel(); <-stopped }() //nolint:errcheck // Start ends with the cancellation
	var r result
	for b.Loop() {
		select {
		case r = <-done:
		case <-time.After(5 * time.Minute):
			b.Fatal("the leader-only runnable did not finish")
		}
	}
	if r.err != nil {
		b.Fatal(r.err)
	}
	slices.Sort(r.ds)
	q := func(p float64) float64 { return float64(r.ds[int(p*float64(len(r.ds)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(r.cache, "decided-on-copy")
	b.ReportMetric(r.quorum, "quorum-reads")
	b.ReportMetric(100*r.cache/(r.cache+r.quorum), "decided-on-copy-%")
	b.Logf("managed.Fence: lease declares %s=%q; %d patches through mgr.GetClient(), p50 %.2f ms, p99 %.2f ms; the webhook decided %.0f on its copy of the Lease, %.0f with a quorum read",
		protocol.FencesAnnotation, r.fences, len(r.ds), q(0.5), q(0.99), r.cache, r.quorum)
}
