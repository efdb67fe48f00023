package objects_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/managed"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// stepBackObjects is how many ConfigMaps the benchmarked controller has in its cache.
const stepBackObjects = 1000

// countingTransport counts the requests a manager sends and the bytes of their answers' bodies.
type countingTransport struct {
	next  http.RoundTripper
	n     atomic.Int64
	bytes atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.bytes}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// firstReconcile is a controller for ConfigMaps that records when each term's first reconcile ran.
type firstReconcile struct {
	mu    sync.Mutex
	first map[int64]time.Time // epoch: the first reconcile's time
	gate  func() *managed.Gate
}

func (f *firstReconcile) setup(m manager.Manager) error {
	return ctrl.NewControllerManagedBy(m).Named("bench").For(&corev1.ConfigMap{}).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			epoch := f.gate().Elector().Token().Epoch
			f.mu.Lock()
			defer f.mu.Unlock()
			if _, ok := f.first[epoch]; !ok {
				f.first[epoch] = time.Now()
			}
			return reconcile.Result{}, nil
		}))
}

func (f *firstReconcile) at(epoch int64) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.first[epoch]
	return t, ok
}

// BenchmarkStepBackVersusRestart: an operator with a controller over 1,000 ConfigMaps loses its Lease (an
// admin takes it over for one lease duration, 2 s) and leads again. Step-back (managed.FenceEachTerm): the
// process keeps running and its cache; the time from the re-acquisition (OnStartedLeading) to the first
// reconcile of the new term, and the requests the manager sent from the loss to that reconcile. Restart
// (what managed.Fence's exit leads to): a new manager in place of the process, on the free Lease, its time
// from start to the first reconcile (cache sync, acquisition) and from its acquisition to that reconcile,
// and its requests; a pod's restart adds the process's start and any back-off.
// No PostAcquire on either side: what is measured is the operator's own return.
func BenchmarkStepBackVersusRestart(b *testing.B) {
	ctx := b.Context()
	ns := env.Namespace(b)
	for i := range stepBackObjects {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("obj-%04d", i)}, Data: map[string]string{"v": strconv.Itoa(i)}}
		if err := env.Client.Create(ctx, cm); err != nil {
			b.Fatal(err)
		}
	}
	ecfg := elector.Config{Namespace: ns, Name: "stepback", Identity: "operator-0", PostAcquire: elector.AcquireHook(nil),
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond, SafetyMargin: 200 * time.Millisecond}
	// newManager is one operator process's manager (a cache of the namespace), with its requests counted.
	newManager := func() (manager.Manager, *countingTransport) {
		ct := &countingTransport{}
		cfg := rest.CopyConfig(env.Config)
		cfg.QPS, cfg.Burst = 1000, 1000
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { ct.next = rt; return ct })
		mgr, err := manager.New(cfg, manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			b.Fatal(err)
		}
		return mgr, ct
	}
	wait := func(what string, ok func() bool) {
		for end := time.Now().Add(time.Minute); !ok(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(end) {
				b.Fatalf("waited a minute for %s", what)
			}
		}
	}
	var stepMs, stepReqs, stepKiB, restartMs, restartAcqMs, restartReqs, restartKiB float64
	for b.Loop() {
		// Step-back.
		base, ct := newManager()
		var mgr manager.Manager
		f := &firstReconcile{first: map[int64]time.Time{}, gate: func() *managed.Gate { return managed.GateOf(mgr) }}
		acquired := sync.Map{} // epoch: time.Time
		cfg := ecfg
		cfg.OnStartedLeading = func(_ context.Context, t elector.Token) { acquired.Store(t.Epoch, time.Now()) }
		var err error
		if mgr, err = managed.FenceEachTerm(base, cfg, f.setup); err != nil {
			b.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- mgr.Start(mctx) }()
		gate := managed.GateOf(mgr)
		wait("the first term's first reconcile", func() bool { _, ok := f.at(gate.Elector().Token().Epoch); return ok && gate.Elector().IsLeader() })
		first := gate.Elector().Token().Epoch
		before, beforeBytes := ct.n.Load(), ct.bytes.Load()
		takeOver(b, ns, ecfg.Name)
		var next int64
		wait("the next term's first reconcile", func() bool {
			next = gate.Elector().Token().Epoch
			_, ok := f.at(next)
			return next > first+1 && ok
		})
		at, _ := acquired.Load(next)
		reconciled, _ := f.at(next)
		stepMs = float64(reconciled.Sub(at.(time.Time))) / float64(time.Millisecond)
		stepReqs, stepKiB = float64(ct.n.Load()-before), float64(ct.bytes.Load()-beforeBytes)/1024
		cancel()
		<-stopped //nolint:errcheck // Start ends with the cancellation

		// Restart: a new process's manager, the Lease free (the step-back manager released it).
		base, ct = newManager()
		var rmgr manager.Manager
		rf := &firstReconcile{first: map[int64]time.Time{}, gate: func() *managed.Gate { return managed.GateOf(rmgr) }}
		racquired := sync.Map{}
		rcfg := ecfg
		rcfg.OnStartedLeading = func(_ context.Context, t elector.Token) { racquired.Store(t.Epoch, time.Now()) }
		if rmgr, err = managed.Fence(base, rcfg); err != nil {
			b.Fatal(err)
		}
		if err := rf.setup(rmgr); err != nil {
			b.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		rstopped := make(chan error, 1)
		start := time.Now()
		go func() { rstopped <- rmgr.Start(rctx) }()
		rgate := managed.GateOf(rmgr)
		var repoch int64
		wait("the restarted manager's first reconcile", func() bool {
			repoch = rgate.Elector().Token().Epoch
			_, ok := rf.at(repoch)
			return repoch != 0 && ok
		})
		rat, _ := racquired.Load(repoch)
		rreconciled, _ := rf.at(repoch)
		restartMs = float64(rreconciled.Sub(start)) / float64(time.Millisecond)
		restartAcqMs = float64(rreconciled.Sub(rat.(time.Time))) / float64(time.Millisecond)
		restartReqs, restartKiB = float64(ct.n.Load()), float64(ct.bytes.Load())/1024
		rcancel()
		<-rstopped //nolint:errcheck // Start ends with the cancellation
	}
	b.ReportMetric(stepMs, "stepback-acquired-to-reconcile-ms")
	b.ReportMetric(stepReqs, "stepback-requests")
	b.ReportMetric(stepKiB, "stepback-KiB-read")
	b.ReportMetric(restartMs, "restart-start-to-reconcile-ms")
	b.ReportMetric(restartAcqMs, "restart-acquired-to-reconcile-ms")
	b.ReportMetric(restartReqs, "restart-requests")
	b.ReportMetric(restartKiB, "restart-KiB-read")
	b.Logf("%d ConfigMaps cached; step-back: first reconcile %.1f ms after the re-acquisition, %.0f requests (%.0f KiB read) from the loss; restart: first reconcile %.1f ms after start (%.1f ms after its acquisition), %.0f requests (%.0f KiB read)",
		stepBackObjects, stepMs, stepReqs, stepKiB, restartMs, restartAcqMs, restartReqs, restartKiB)
}

// takeOver makes an admin the holder of Lease ns/name at the next epoch for one lease duration (2 s): its
// holder loses it.
func takeOver(b *testing.B, ns, name string) {
	b.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(b.Context(), client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
		b.Fatal(err)
	}
	epoch, err := strconv.ParseInt(l.Annotations[protocol.EpochAnnotation], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	l.Annotations[protocol.EpochAnnotation] = strconv.FormatInt(epoch+1, 10)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To("admin"), ptr.To(int32(2))
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if err := env.Client.Update(b.Context(), &l, client.FieldOwner(protocol.FieldManagerFor(epoch+1))); err != nil {
		b.Fatal(err)
	}
}
