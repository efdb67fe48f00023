package controllers_test

import (
	"fmt"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/operatortest"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// rejected reads fencekit_stale_writes_rejected_total{namespace,lease,reason} from controller-runtime's
// registry, which the in-process operator's webhook counts into.
func rejected(t *testing.T, namespace, lease string, reason fencing.Reason) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fencekit_stale_writes_rejected_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == namespace && labels["lease"] == lease && labels["reason"] == string(reason) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// eventuallyEvent waits for a Warning Event (events.k8s.io/v1) regarding the FencedResource name with the
// given reason and note.
func eventuallyEvent(t *testing.T, ns, name string, reason fencing.Reason, note string) {
	t.Helper()
	eventually(t, fmt.Sprintf("a Warning %s Event on FencedResource %s", reason, name), func() (bool, string) {
		var list eventsv1.EventList
		if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			seen = append(seen, fmt.Sprintf("%s %s %s/%s %q", e.Type, e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Note))
			if e.Type == "Warning" && e.Reason == string(reason) && e.Action == "Write" && e.Note == note &&
				e.Regarding.Kind == "FencedResource" && e.Regarding.Name == name && e.Regarding.Namespace == ns {
				return true, ""
			}
		}
		return false, fmt.Sprintf("events %v", seen)
	})
}

// settled waits until the operator has caught up with the Lease at epoch (the status shows it, for the
// current generation) and the apiserver's watch cache holds that status write. A write whose first
// admission works on a stale cached copy is admitted again on the current one (the apiserver's
// GuaranteedUpdate retries when its cached copy was stale), so a refusal racing the operator's status
// write reaches the webhook, and its counter, twice.
func settled(t *testing.T, key types.NamespacedName, epoch int64) {
	t.Helper()
	var rv string
	eventually(t, fmt.Sprintf("FencedResource %s's status at lease epoch %d", key, epoch), func() (bool, string) {
		var fr fencingv1alpha1.FencedResource
		if err := env.Client.Get(t.Context(), key, &fr); err != nil {
			return false, err.Error()
		}
		rv = fr.ResourceVersion
		return fr.Status.LeaseEpoch == epoch && fr.Status.ObservedGeneration == fr.Generation,
			fmt.Sprintf("leaseEpoch %d, observedGeneration %d of %d", fr.Status.LeaseEpoch, fr.Status.ObservedGeneration, fr.Generation)
	})
	// A list served from the watch cache at a resourceVersion not older than rv answers only once the
	// cache has caught up with rv.
	var list fencingv1alpha1.FencedResourceList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(key.Namespace), &client.ListOptions{Raw: &metav1.ListOptions{
		ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}}); err != nil {
		t.Fatal(err)
	}
}

// TestRefusedWritesAreReported: each write the webhook refuses leaves a Warning Event on the resource,
// with the fencing reason and the refusal's message, and counts in fencekit_stale_writes_rejected_total.
func TestRefusedWritesAreReported(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key := declare(t, ns, "orders", "orders-writer")
	ta := a.Acquire(t, ns, "orders-writer", 5)
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5"}); err != nil {
		t.Fatal(err)
	}
	// worker-b takes over without fencing the resource: worker-a's write at epoch 5 passes the CRD's own
	// rule (the resource is at 5) and reaches the webhook, which knows the lease is at 6.
	tb := b.Acquire(t, ns, "orders-writer", 6)
	settled(t, key, 6)

	_, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5-late"})
	if !fencing.IsStale(err) {
		t.Fatalf("worker-a's late write: got %v, want a stale refusal", err)
	}
	eventuallyEvent(t, ns, "orders", fencing.ReasonStale, "FencedResource "+ns+"/orders: stale epoch 5: lease orders-writer is at epoch 6, held by worker-b")
	if got := rejected(t, ns, "orders-writer", fencing.ReasonStale); got != 1 {
		t.Errorf("fencekit_stale_writes_rejected_total{reason=%q} = %v after one refused write, want 1", fencing.ReasonStale, got)
	}

	// worker-a presents worker-b's token: the right epoch, the wrong user.
	_, err = fencing.NewWriter(a.Client).Set(ctx, tb, key, map[string]any{"v": "copied"})
	if !fencing.IsNotHolder(err) {
		t.Fatalf("worker-a's write with worker-b's token: got %v, want a not-holder refusal", err)
	}
	eventuallyEvent(t, ns, "orders", fencing.ReasonNotHolder,
		fmt.Sprintf(`user "worker-a-user" is not the user that acquired lease orders-writer at epoch 6 ("worker-b-user"): only the holder worker-b may write FencedResource %s/orders`, ns))
	if got := rejected(t, ns, "orders-writer", fencing.ReasonNotHolder); got != 1 {
		t.Errorf("fencekit_stale_writes_rejected_total{reason=%q} = %v after one refused write, want 1", fencing.ReasonNotHolder, got)
	}
	if got := rejected(t, ns, "orders-writer", fencing.ReasonStale); got != 1 {
		t.Errorf("fencekit_stale_writes_rejected_total{reason=%q} = %v, want still 1", fencing.ReasonStale, got)
	}
}
