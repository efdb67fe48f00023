package managed_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/managed"
)

// replica is one manager with a gate: a leader-only runnable behind the gate, and an "always" runnable
// (standing in for a webhook server) added to the manager directly.
type replica struct {
	name         string
	gate         *managed.Gate
	leaderOnly   chan elector.Token
	leaderActive atomic.Bool
	always       chan struct{}
	cancel       context.CancelFunc
	result       chan error
}

func startReplica(t *testing.T, ns, name string) *replica {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, leaderOnly: make(chan elector.Token, 10), always: make(chan struct{}, 1), result: make(chan error, 1)}
	cfg := shortConfig(ns)
	cfg.Client, cfg.Identity = cs, name
	r.gate, err = managed.NewGate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(env.Config, managerOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(r.gate); err != nil {
		t.Fatal(err)
	}
	// Both runnables go through the gate's view of the manager: a plain runnable needs leader election
	// (controller-runtime's rule) and goes to the gate; one that says it does not goes to the manager.
	view := r.gate.Manager(mgr)
	if err := view.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.leaderActive.Store(true)
		defer r.leaderActive.Store(false)
		r.leaderOnly <- r.gate.Elector().Token()
		<-ctx.Done()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := view.Add(everyReplica{manager.RunnableFunc(func(ctx context.Context) error {
		r.always <- struct{}{}
		<-ctx.Done()
		return nil
	})}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.result <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.result: //nolint:errcheck // Start ends with the cancellation
		case <-time.After(30 * time.Second):
			t.Errorf("manager %s did not stop", name)
		}
	})
	return r
}

// everyReplica is a runnable that does not need leader election, as a webhook server.
type everyReplica struct{ manager.Runnable }

func (everyReplica) NeedLeaderElection() bool { return false }

func waitToken(t *testing.T, ch <-chan elector.Token, within time.Duration, what string) elector.Token {
	t.Helper()
	select {
	case tok := <-ch:
		return tok
	case <-time.After(within):
		t.Fatalf("%s: not within %v", what, within)
		return elector.Token{}
	}
}

func TestGateRunsLeaderOnlyRunnablesOnTheLeaderOnly(t *testing.T) {
	ns := env.Namespace(t)
	a := startReplica(t, ns, "replica-a")
	b := startReplica(t, ns, "replica-b")
	for _, r := range []*replica{a, b} {
		select {
		case <-r.always:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the runnable added to the manager directly did not start", r.name)
		}
	}
	var leader, standby *replica
	select {
	case tok := <-a.leaderOnly:
		leader, standby = a, b
		_ = tok
	case tok := <-b.leaderOnly:
		leader, standby = b, a
		_ = tok
	case <-time.After(30 * time.Second):
		t.Fatal("no replica started its leader-only runnable")
	}
	if standby.leaderActive.Load() || standby.gate.Elector().IsLeader() {
		t.Fatalf("%s runs its leader-only runnable while %s leads", standby.name, leader.name)
	}
	first := leader.gate.Elector().Token()

	// The leader's manager stops: the gate releases and returns nil; the standby takes over at once.
	leader.cancel()
	select {
	case err := <-leader.result:
		if err != nil {
			t.Errorf("the leader's manager returned %v after a clean stop", err)
		}
		leader.result <- err
	case <-time.After(30 * time.Second):
		t.Fatal("the leader's manager did not stop")
	}
	if leader.leaderActive.Load() {
		t.Error("the leader-only runnable still runs after its manager stopped")
	}
	tok := waitToken(t, standby.leaderOnly, 10*time.Second, "takeover")
	if tok.Holder != standby.name || tok.Epoch != first.Epoch+1 {
		t.Errorf("takeover token %v after %v", tok, first)
	}
}

func TestGateReturnsAnErrorWhenLeadershipIsLost(t *testing.T) {
	ns := env.Namespace(t)
	a := startReplica(t, ns, "replica-a")
	tok := waitToken(t, a.leaderOnly, 30*time.Second, "leadership")
	cs, _ := kubernetes.NewForConfig(env.Config)
	l, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), "operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := "someone-else"
	l.Spec.HolderIdentity = &other
	if _, err := cs.CoordinationV1().Leases(ns).Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.result:
		if err == nil || !errors.Is(err, elector.ErrLeadershipLost) || !strings.Contains(err.Error(), "holder_changed") {
			t.Errorf("manager returned %v, want leadership lost (holder_changed) at %v", err, tok)
		}
		a.result <- err
	case <-time.After(30 * time.Second):
		t.Fatal("the manager kept running after leadership was lost")
	}
	if a.leaderActive.Load() {
		t.Error("the leader-only runnable still runs after leadership was lost")
	}
}
