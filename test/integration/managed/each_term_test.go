package managed_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
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
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/managed"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/netproxy"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// termLog records which epoch each reconcile ran at and what its write returned.
type termLog struct {
	mu      sync.Mutex
	epochs  []int64
	refused []error
}

func (l *termLog) add(epoch int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epochs = append(l.epochs, epoch)
	if err != nil {
		l.refused = append(l.refused, err)
	}
}

func (l *termLog) last() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.epochs) == 0 {
		return 0
	}
	return l.epochs[len(l.epochs)-1]
}

// TestFenceEachTermStepsBack: an operator under FenceEachTerm, whose controller renders a ConfigMap with
// the epoch it reconciled at, reaches the apiserver through a proxy. It loses its Lease twice and keeps
// running: another holder takes the Lease (an admin's takeover), then the apiserver is out of its reach
// for 4 s (past RenewDeadline and the lease). Each time the term's controller stops, the manager goes on
// (Start has not returned), the elector acquires again once it can, and the controller, built anew,
// reconciles at the new epoch. A write through the old term's client after the loss fails with
// fencing.ErrNoToken, sent nowhere.
func TestFenceEachTermStepsBack(t *testing.T) {
	ns := env.Namespace(t)
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netproxy.NewProxy("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + proxy.Addr()
	base, err := manager.New(cfg, managerOptions())
	if err != nil {
		t.Fatal(err)
	}
	ecfg := shortConfig(ns)
	ecfg.PostAcquire = elector.AcquireHook(nil) // no FencingPolicy here: nothing to raise
	var log termLog
	builds := 0
	var mgr manager.Manager
	mgr, err = managed.FenceEachTerm(base, ecfg, func(m manager.Manager) error {
		builds++
		c := m.GetClient()
		return ctrl.NewControllerManagedBy(m).Named("render").For(&corev1.ConfigMap{}).
			WithEventFilter(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()["role"] == "source" })).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				tok := managed.GateOf(mgr).Elector().Token()
				out := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rendered"}}
				_, err := ctrl.CreateOrUpdate(ctx, c, out, func() error {
					out.Data = map[string]string{"epoch": strconv.FormatInt(tok.Epoch, 10)}
					return nil
				})
				log.add(tok.Epoch, err)
				return reconcile.Result{}, err
			}))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(context.Context) error { return nil })); err == nil {
		t.Error("the returned manager's Add took a leader-only runnable outside the setup function")
	}
	if err := env.Client.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "source", Labels: map[string]string{"role": "source"}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done }) //nolint:errcheck // Start ends with the cancellation
	gate := managed.GateOf(mgr)
	rendered := func(after int64) int64 {
		t.Helper()
		var got int64
		testenv.Eventually(t, fmt.Sprintf("a reconcile at an epoch above %d", after), func() (bool, string) {
			got = log.last()
			return got > after, fmt.Sprintf("last reconcile at epoch %d", got)
		})
		var cm corev1.ConfigMap
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "rendered"}, &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Data["epoch"] != strconv.FormatInt(got, 10) {
			t.Errorf("rendered holds epoch %q, want %d", cm.Data["epoch"], got)
		}
		return got
	}
	running := func(when string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("the manager stopped %s: %v", when, err)
		default:
		}
	}
	first := rendered(0)
	// The fenced client the reconcilers write with: the same across terms, it presents the current token.
	oldClient := mgr.GetClient()

	// Loss 1: another holder takes the Lease.
	takeLease(t, ns, ecfg.Name, "admin")
	testenv.Eventually(t, "the elector sees the takeover", func() (bool, string) { return !gate.Elector().IsLeader(), "" })
	if err := oldClient.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"}}); !fencing.IsNoToken(err) {
		t.Errorf("a write through the fenced client after the loss: %v, want fencing.ErrNoToken", err)
	}
	running("after another holder took the Lease")
	second := rendered(first + 1)
	running("after the first re-acquisition")

	// Loss 2: the apiserver out of reach past RenewDeadline and the lease.
	proxy.Set(netproxy.Blackhole, 0)
	time.Sleep(4 * time.Second)
	if gate.Elector().IsLeader() {
		t.Error("the elector still leads after 4 s without the apiserver")
	}
	proxy.Set(netproxy.Pass, 0)
	third := rendered(second)
	running("after the apiserver came back")
	t.Logf("reconciled at epochs %d, %d (after a takeover), %d (after 4 s without the apiserver); setup ran %d times", first, second, third, builds)
	if builds < 3 {
		t.Errorf("setup ran %d times for 3 terms", builds)
	}
	if len(log.refused) > 0 {
		t.Logf("writes refused on the way (a term ending mid-reconcile): %v", log.refused)
	}
}

// takeLease makes holder the holder of Lease ns/name at the next epoch, as a break-glass takeover.
func takeLease(t *testing.T, ns, name, holder string) {
	t.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &l); err != nil {
		t.Fatal(err)
	}
	epoch, err := strconv.ParseInt(l.Annotations[protocol.EpochAnnotation], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[protocol.EpochAnnotation] = strconv.FormatInt(epoch+1, 10)
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if err := env.Client.Update(t.Context(), &l, client.FieldOwner(protocol.FieldManagerFor(epoch+1))); err != nil {
		t.Fatal(err)
	}
}
