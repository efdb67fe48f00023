package elector_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/fencekit/fencekit/pkg/elector"
)

// An availability attack on the fence-on-acquire declaration: another workload with the fencekit-elector role
// adds "objects" to the Lease of an elector that fences FencedResources only. Were it admitted, every later
// acquisition by the holder's own configuration would be refused (a declared kind is never dropped), and
// the Lease would stay locked until a break-glass user removed the kind. The Lease policy refuses it: the
// declaration changes only in an acquisition. The holder keeps leading, and after its release its own
// configuration takes the Lease again.
func TestFencesDeclarationAddedByAnotherUser(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.Namespace(t)
	h := newHistory()
	hook := func(context.Context, elector.Token) error { return nil }
	cfg := shortConfig(t, ns, "lock", "a")
	cfg.Client = electorClientset(t, ns, "a-user")
	cfg.OnStartedLeading = h.lead
	cfg.PostAcquire = elector.DeclaredForTest(hook, elector.Fences{FencedResources: true})
	a := start(t, cfg)
	first := h.wait(t, 30*time.Second)

	leases := electorClientset(t, ns, "mallory-user").CoordinationV1().Leases(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, "lock", metav1.GetOptions{})
		if err != nil {
			return err
		}
		l.Annotations[elector.FencesAnnotation] = "fencedresources,objects"
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
	if got := getLease(t, ns, "lock").Annotations[elector.FencesAnnotation]; got != "fencedresources" {
		t.Fatalf("declaration %q, want %q", got, "fencedresources")
	}
}
