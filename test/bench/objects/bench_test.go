package objects_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

const (
	writesPerMode = 600 // measured writes per mode
	warmup        = 20
	// decisionWrites fenced writes, after the measured ones, count where the webhook decides them.
	decisionWrites = 200
)

func grant(b *testing.B, ns, user string) {
	env.Grant(b, ns, "cm", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}, user)
}

// BenchmarkObjectWrite measures a merge patch of one small ConfigMap's data by one user, in three modes:
// "unfenced", the patch with a plain client in a namespace without a policy (no webhook is called);
// "fenced", the same patch in a namespace whose FencingPolicy declares ConfigMaps, by a holder whose Lease
// declares fence-on-acquire for objects (fencing.NewClient: the token as field manager, the epoch record
// added to the patch; the object webhook admits it on its watch-fed copy of the Lease, webhook.LeaseCache);
// "fenced-quorum", the same in a third namespace whose Lease declares nothing, so that the webhook reads the
// Lease with a quorum read for every write (what every fenced write cost before the copy). The modes take
// turns write by write, so that a drift of the control plane falls on every mode alike. It reports p50, p90 and p99 in
// ms, each fenced mode's p50 over the unfenced one, its sequential writes per second as a percentage of the
// unfenced mode's, and the share of the fenced mode's writes decided on the copy.
func BenchmarkObjectWrite(b *testing.B) {
	operatortest.Start(b, env)
	ctx := b.Context()
	plainNS := env.Namespace(b)
	// client-go's default limit (5 requests/s) would measure itself: every mode's holder lifts it (fastHolder).
	type fencedMode struct {
		ns     string
		holder testenv.Worker
		tok    elector.Token
		client client.Client
		at     time.Time
	}
	setup := func(declare protocol.Fences) *fencedMode {
		m := &fencedMode{ns: env.Namespace(b)}
		m.holder = fastHolder(b, m.ns, "holder")
		m.holder.Fences = declare
		grant(b, m.ns, m.holder.User)
		fenceConfigMaps(b, m.ns)
		testenv.Eventually(b, "the policy is enforced", func() (bool, string) {
			err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "probe"}}, client.DryRunAll)
			return fencing.IsTokenMissing(err), fmt.Sprint(err)
		})
		m.tok, m.at = m.holder.Acquire(b, m.ns, "bench-writer", 1), time.Now()
		m.client = fencing.NewClient(m.holder.Client, func() elector.Token { return m.tok })
		testenv.Eventually(b, "the holder (RBAC granted) creates the ConfigMap", func() (bool, string) {
			err := m.client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: "bench"}, Data: map[string]string{"seq": "0"}})
			return err == nil, fmt.Sprint(err)
		})
		return m
	}
	// The Lease (15 s) must stay live for the whole run: renew it every 2 s at the same epoch, as the
	// elector does, outside the measured writes. (Taking it again at a new epoch instead would add a field
	// manager, fencing.fencekit.io/epoch=N, to the object's managedFields at every epoch: not what a
	// holder's steady writes look like.)
	renew := func(m *fencedMode) {
		if time.Since(m.at) < 2*time.Second {
			return
		}
		m.holder.Renew(b, m.tok)
		m.at = time.Now()
	}
	fenced, quorum := setup(protocol.Fences{Objects: true}), setup(protocol.Fences{})
	holder := fastHolder(b, plainNS, "plain")
	grant(b, plainNS, holder.User)
	testenv.Eventually(b, "the plain ConfigMap is created (RBAC granted)", func() (bool, string) {
		err := holder.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: plainNS, Name: "bench"}, Data: map[string]string{"seq": "0"}})
		return err == nil, fmt.Sprint(err)
	})
	seq := 0
	patch := func(c client.Client, ns string) error {
		seq++
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench"}}
		return c.Patch(ctx, cm, client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"data":{"seq":"%d"}}`, seq))))
	}
	write := map[string]func() error{
		"unfenced":      func() error { return patch(holder.Client, plainNS) },
		"fenced":        func() error { renew(fenced); return patch(fenced.client, fenced.ns) },
		"fenced-quorum": func() error { renew(quorum); return patch(quorum.client, quorum.ns) },
	}
	modes := []string{"unfenced", "fenced", "fenced-quorum"}
	samples := map[string][]time.Duration{}
	var cacheReads, quorumReads float64
	for b.Loop() {
		samples = map[string][]time.Duration{}
		for i := range warmup + writesPerMode {
			// One write of each mode in turn, starting from a different mode each round, so that a drift of
			// the control plane, or a pause of the machine, falls on every mode alike.
			for k := range modes {
				mode := modes[(i+k)%len(modes)]
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
	// Where the fenced mode's writes are decided, counted apart from the other modes' (the webhook's reads
	// are counted by source only).
	cacheReads, quorumReads = -leaseReads(b, "cache"), -leaseReads(b, "apiserver")
	for i := range decisionWrites {
		if err := write["fenced"](); err != nil {
			b.Fatalf("fenced write %d: %v", i, err)
		}
	}
	cacheReads, quorumReads = cacheReads+leaseReads(b, "cache"), quorumReads+leaseReads(b, "apiserver")
	p50, perSecond := map[string]float64{}, map[string]float64{}
	for _, mode := range modes {
		s := samples[mode]
		var total time.Duration
		for _, d := range s {
			total += d
		}
		perSecond[mode] = float64(len(s)) / total.Seconds()
		slices.Sort(s)
		q := func(p float64) float64 { return float64(s[int(p*float64(len(s)-1))]) / float64(time.Millisecond) }
		p50[mode] = q(0.5)
		b.ReportMetric(q(0.5), mode+"-p50-ms")
		b.ReportMetric(q(0.9), mode+"-p90-ms")
		b.ReportMetric(q(0.99), mode+"-p99-ms")
		b.Logf("%s: %d writes, p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, %.0f writes/s", mode, len(s), q(0.5), q(0.9), q(0.99), perSecond[mode])
	}
	for _, mode := range modes[1:] {
		b.ReportMetric(p50[mode]/p50["unfenced"], mode+"/unfenced-p50")
		b.ReportMetric(100*perSecond[mode]/perSecond["unfenced"], mode+"/unfenced-writes-%")
	}
	b.ReportMetric(100*cacheReads/(cacheReads+quorumReads), "fenced-decided-on-copy-%")
	b.Logf("fenced: %.0f decisions on the copy of the Lease, %.0f quorum reads", cacheReads, quorumReads)
}

// leaseReads reads fencekit_webhook_lease_reads_total{webhook="objects",source} from controller-runtime's
// registry (the operator runs in this process).
func leaseReads(b *testing.B, source string) float64 {
	return testenv.CounterSum(b, "fencekit_webhook_lease_reads_total", map[string]string{"webhook": "objects", "source": source})
}
