package managed_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/managed"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestFence: the one-line opt-in. Before the elector leads, a write through mgr.GetClient() fails with
// fencing.ErrNoToken and reaches nothing; a leader-only runnable added through the returned manager runs
// once it leads; its writes present the token as their field manager and carry the epoch record.
func TestFence(t *testing.T) {
	ns := env.Namespace(t)
	base, err := manager.New(env.Config, managerOptions())
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := managed.Fence(base, shortConfig(ns))
	if err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rendered"}, Data: map[string]string{"v": "1"}}
	if err := c.Create(t.Context(), cm.DeepCopy()); !fencing.IsNoToken(err) {
		t.Fatalf("a write before leadership: %v, want fencing.ErrNoToken", err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err == nil {
		t.Fatal("a write without a token reached the apiserver")
	}
	wrote := make(chan error, 1)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		wrote <- c.Create(ctx, cm.DeepCopy())
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	startManager(t, mgr)
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("the leader-only runnable's write: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the leader-only runnable did not run")
	}
	tok := managed.GateOf(mgr).Elector().Token()
	var got corev1.ConfigMap
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(cm), &got); err != nil {
		t.Fatal(err)
	}
	if rec := got.Annotations[fencingv1alpha1.ObjectEpochAnnotation]; tok.IsZero() || rec != strconv.FormatInt(tok.Epoch, 10) {
		t.Errorf("the written ConfigMap records epoch %q, the elector holds %v", rec, tok)
	}
	if len(got.ManagedFields) == 0 || got.ManagedFields[0].Manager != tok.FieldManager() {
		t.Errorf("the write's field manager is %v, want %s", got.ManagedFields, tok.FieldManager())
	}
	// By default every acquisition fences the declared objects, and the Lease says so: the webhook admits
	// the writes on its copy of the Lease.
	var lease coordinationv1.Lease
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "operator"}, &lease); err != nil {
		t.Fatal(err)
	}
	if got := lease.Annotations[protocol.FencesAnnotation]; got != protocol.FencesObjects {
		t.Errorf("lease %s/operator declares %s=%q, want %q", ns, protocol.FencesAnnotation, got, protocol.FencesObjects)
	}
}

// TestFenceRefusesTheManagersOwnElection: a manager built with LeaderElection on (kubebuilder's
// --leader-elect) would run controller-runtime's election beside fencekit's: Fence and NewManager refuse it
// with an error naming the option, and accept the same manager with it off.
func TestFenceRefusesTheManagersOwnElection(t *testing.T) {
	ns := env.Namespace(t)
	opts := func(le bool) manager.Options {
		o := managerOptions()
		o.LeaderElection, o.LeaderElectionID, o.LeaderElectionNamespace = le, "my-operator", ns
		return o
	}
	ecfg := elector.Config{Namespace: ns, Name: "operator"}
	withLE, err := manager.New(env.Config, opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := managed.Fence(withLE, ecfg); err == nil || !strings.Contains(err.Error(), "manager.Options.LeaderElection is true") {
		t.Errorf("Fence of a manager with its own leader election: %v, want a refusal naming manager.Options.LeaderElection", err)
	}
	if _, err := managed.NewManager(env.Config, opts(true), ecfg); err == nil ||
		!strings.Contains(err.Error(), `manager.Options.LeaderElection is true (LeaderElectionID "my-operator")`) ||
		!strings.Contains(err.Error(), "set LeaderElection to false") {
		t.Errorf("NewManager with LeaderElection: %v, want a refusal naming the option and what to change", err)
	}
	without, err := manager.New(env.Config, opts(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := managed.Fence(without, ecfg); err != nil {
		t.Errorf("Fence of a manager without its own leader election: %v", err)
	}
	if _, err := managed.NewManager(env.Config, opts(false), ecfg); err != nil {
		t.Errorf("NewManager without LeaderElection: %v", err)
	}
}

// TestFenceOptOut: with cfg.PostAcquire set to elector.AcquireHook(nil), Fence fences nothing on acquisition
// and the Lease declares nothing (the webhook then reads the Lease with a quorum read for each write).
func TestFenceOptOut(t *testing.T) {
	ns := env.Namespace(t)
	led := make(chan struct{}, 1)
	mgr, err := managed.NewManager(env.Config, managerOptions(),
		elector.Config{Namespace: ns, Name: "operator", Identity: "replica-a", PostAcquire: elector.AcquireHook(nil),
			OnStartedLeading: func(context.Context, elector.Token) { led <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, mgr)
	select {
	case <-led:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not lead")
	}
	var lease coordinationv1.Lease
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "operator"}, &lease); err != nil {
		t.Fatal(err)
	}
	if got, ok := lease.Annotations[protocol.FencesAnnotation]; ok {
		t.Errorf("lease %s/operator declares %s=%q, want no declaration", ns, protocol.FencesAnnotation, got)
	}
}

// TestFenceLogsThroughTheManager: the elector that Fence builds logs through the manager's logger (named
// "elector"), not klog's global one, although the manager starts the gate with a context that carries no
// logger.
func TestFenceLogsThroughTheManager(t *testing.T) {
	ns := env.Namespace(t)
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{})
	opts := managerOptions()
	opts.Logger = log
	base, err := manager.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := managed.Fence(base, shortConfig(ns))
	if err != nil {
		t.Fatal(err)
	}
	startManager(t, mgr)
	testenv.Eventually(t, "the elector's \"Acquired the Lease\" line in the manager's log", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.HasPrefix(l, "elector ") && strings.Contains(l, `"msg"="Acquired the Lease"`) &&
				strings.Contains(l, fmt.Sprintf(`"lease"="%s/operator"`, ns)) {
				return true, ""
			}
		}
		return false, strings.Join(lines, "\n")
	})
}
