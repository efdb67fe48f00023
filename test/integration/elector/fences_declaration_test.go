package elector_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// fenceResources is pkg/fencing's fence-on-acquire of FencedResources, declared "fencedresources", with the
// admin client: its raise lists the test namespace's FencedResources (there are none), so it only declares.
func fenceResources() elector.AcquireFence { return fencing.FenceOnAcquire(env.Client) }

// fenceAll is pkg/fencing's fence-on-acquire of FencedResources and of the objects FencingPolicies declare,
// declared "fencedresources,objects" (the namespace holds neither).
func fenceAll() elector.AcquireFence {
	return elector.JoinFences(fencing.FenceOnAcquire(env.Client), fencing.FenceObjectsOnAcquire(env.Client, env.Client))
}

// leadFencingResources starts the elector "a", held to the Lease policy, that fences FencedResources
// (fenceResources) on the Lease "lock" of ns, and waits for its first leadership.
func leadFencingResources(t *testing.T, ns string, h *history) (elector.Config, *candidate, elector.Token) {
	t.Helper()
	cfg := h.policyConfig(t, ns, "a")
	cfg.PostAcquire = fenceResources()
	a := start(t, cfg)
	return cfg, a, h.wait(t, 30*time.Second)
}

// An availability attack on the fence-on-acquire declaration: another workload with the fencekit-elector role
// adds "objects" to the Lease of an elector that fences FencedResources only. Were it admitted, every later
// acquisition by the holder's own configuration would be refused (a declared kind is never dropped), and
// the Lease would stay locked until a break-glass user removed the kind. The Lease policy refuses it: the
// declaration changes only in an acquisition. The holder keeps leading, and after its release its own
// configuration takes the Lease again.
func TestFencesDeclarationAddedByAnotherUser(t *testing.T) {
	ctx := t.Context()
	ns, h := parallelLock(t)
	cfg, a, first := leadFencingResources(t, ns, h)

	leases := electorClientset(t, ns, "mallory-user").CoordinationV1().Leases(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, "lock", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Annotations[protocol.FencesAnnotation] = "fencedresources,objects"
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "changes only in an acquisition") {
		t.Fatalf("another elector-role user adding objects to the declaration, presenting nothing: %v, want refused", err)
	}
	if !a.e.IsLeader() {
		t.Fatal("the holder lost the Lease, want it still leading")
	}
	a.stop()
	start(t, cfg)
	second := h.wait(t, 30*time.Second)
	if second.Epoch != first.Epoch+1 {
		t.Fatalf("the holder's configuration took the Lease at %v, want epoch %d", second, first.Epoch+1)
	}
	if got := getLease(t, ns, "lock").Annotations[protocol.FencesAnnotation]; got != "fencedresources" {
		t.Fatalf("declaration %q, want %q", got, "fencedresources")
	}
}

// What Config.PostAcquire declares is written on the Lease in every acquisition, and once the Lease declares a kind
// an elector that does not fence it cannot take the Lease: the Lease policy refuses the acquisition (the
// elector, which rewrites the declaration from its own Config, never inherits a promise it does not keep),
// and the elector reports it. One that declares it takes the Lease at the next epoch.
func TestFencesDeclarationUnderLeasePolicy(t *testing.T) {
	ns, h := parallelLock(t)
	_, a, first := leadFencingResources(t, ns, h)
	if got := getLease(t, ns, "lock").Annotations[protocol.FencesAnnotation]; got != "fencedresources" {
		t.Fatalf("declaration %q after the acquisition, want %q", got, "fencedresources")
	}
	a.stop()

	var logs logLines
	cfg := h.policyConfig(t, ns, "b")
	start(t, cfg, elector.WithLogger(logs.logger()))
	eventually(t, 20*time.Second, "the policy refuses the acquisition by an elector that does not fence", func() bool {
		return logs.has("declares that every acquisition fences its FencedResources")
	})
	if l := getLease(t, ns, "lock"); holderOf(l) != "" || l.Annotations[protocol.EpochAnnotation] != strconv.FormatInt(first.Epoch, 10) {
		t.Fatalf("the Lease changed hands: holder %q at epoch %s, want released at %d", holderOf(l), l.Annotations[protocol.EpochAnnotation], first.Epoch)
	}

	cfg = h.policyConfig(t, ns, "c")
	cfg.PostAcquire = fenceAll()
	start(t, cfg)
	third := h.wait(t, 30*time.Second)
	if third.Holder != "c" || third.Epoch != first.Epoch+1 {
		t.Fatalf("got %v, want c at epoch %d", third, first.Epoch+1)
	}
	if got := getLease(t, ns, "lock").Annotations[protocol.FencesAnnotation]; got != "fencedresources,objects" {
		t.Fatalf("declaration %q, want %q", got, "fencedresources,objects")
	}
}
