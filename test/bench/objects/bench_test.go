package objects_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/operatortest"
	"github.com/fencekit/fencekit/internal/testenv"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

const (
	writesPerPhase = 200 // measured writes per phase and mode; phases A B B A: 400 per mode
	warmup         = 20
)

func grant(b *testing.B, ns, user string) {
	b.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cm"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	for _, o := range []client.Object{role, rb} {
		if err := env.Client.Create(b.Context(), o); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkObjectWrite measures a merge patch of one small ConfigMap's data by one user: "fenced" in a
// namespace whose FencingPolicy declares ConfigMaps (fencing.NewClient: the token as field manager, the
// epoch record added to the patch; the apiserver calls the object webhook, which lists the namespace's
// policies from its cache and reads the Lease with a quorum read), "unfenced" the same patch with a plain
// client in a namespace without a policy (no webhook is called). Phases run A B B A so that a drift of the
// control plane falls on both alike. It reports p50, p90 and p99 in ms and the ratio of the p50s.
func BenchmarkObjectWrite(b *testing.B) {
	operatortest.Start(b, env)
	ctx := b.Context()
	fencedNS, plainNS := env.Namespace(b), env.Namespace(b)
	holder := env.NewWorker(b, fencedNS, "holder")
	// client-go's default limit (5 requests/s) would measure itself: lift it, for both modes alike.
	cfg := rest.CopyConfig(holder.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	fast, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	holder.Client = fast
	grant(b, fencedNS, holder.User)
	grant(b, plainNS, holder.User)
	policy := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: fencedNS, Name: "bench"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "bench-writer", Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps"}}}}
	if err := env.Client.Create(ctx, policy); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, "the policy is enforced", func() (bool, string) {
		err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fencedNS, Name: "probe"}}, client.DryRunAll)
		return fencing.IsTokenMissing(err), fmt.Sprint(err)
	})
	tok := holder.Acquire(b, fencedNS, "bench-writer", 1)
	// The Lease (15 s) must stay live for the whole run: take it again every 5 s, outside the measured writes.
	renewed := time.Now()
	renew := func() {
		if time.Since(renewed) > 5*time.Second {
			holder.Acquire(b, fencedNS, "bench-writer", tok.Epoch+1)
			tok.Epoch++
			renewed = time.Now()
		}
	}
	fenced := fencing.NewClient(holder.Client, func() elector.Token { return tok })
	fencedCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fencedNS, Name: "bench"}, Data: map[string]string{"seq": "0"}}
	plainCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: plainNS, Name: "bench"}, Data: map[string]string{"seq": "0"}}
	testenv.Eventually(b, "the holder (RBAC granted) creates both ConfigMaps", func() (bool, string) {
		err := fenced.Create(ctx, fencedCM.DeepCopy())
		if err == nil {
			err = holder.Client.Create(ctx, plainCM.DeepCopy())
		}
		return err == nil, fmt.Sprint(err)
	})
	seq := 0
	write := map[string]func() error{
		"fenced": func() error {
			seq++
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: fencedNS, Name: "bench"}}
			return fenced.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"seq":"%d"}}`, seq))))
		},
		"unfenced": func() error {
			seq++
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: plainNS, Name: "bench"}}
			return holder.Client.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"seq":"%d"}}`, seq))))
		},
	}
	samples := map[string][]time.Duration{}
	for b.Loop() {
		samples = map[string][]time.Duration{}
		for _, mode := range []string{"unfenced", "fenced", "fenced", "unfenced"} {
			for i := 0; i < warmup+writesPerPhase; i++ {
				renew()
				start := time.Now()
				if err := write[mode](); err != nil {
					b.Fatalf("%s write %d: %v", mode, i, err)
				}
				if i >= warmup {
					samples[mode] = append(samples[mode], time.Since(start))
				}
			}
		}
	}
	p50 := map[string]float64{}
	for _, mode := range []string{"unfenced", "fenced"} {
		s := samples[mode]
		slices.Sort(s)
		q := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1))]) / float64(time.Millisecond) }
		p50[mode] = q(0.5)
		b.ReportMetric(q(0.5), mode+"-p50-ms")
		b.ReportMetric(q(0.9), mode+"-p90-ms")
		b.ReportMetric(q(0.99), mode+"-p99-ms")
		b.Logf("%s: %d writes, p50 %.2f ms, p90 %.2f ms, p99 %.2f ms", mode, len(s), q(0.5), q(0.9), q(0.99))
	}
	b.ReportMetric(p50["fenced"]/p50["unfenced"], "fenced/unfenced-p50")
}
