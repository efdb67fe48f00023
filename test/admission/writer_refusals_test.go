package admission_test

import (
	"testing"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The writer's refusal counter against the running operator: the webhook must be there for the second
// mechanism, so the test lives on the operator's side of the import rules (docs/design/imports.md).

// writerRefusals reads fencekit_writer_refusals_total{lease,mechanism,reason} from controller-runtime's
// registry.
func writerRefusals(t *testing.T, lease, mechanism string, reason protocol.Reason) float64 {
	return testenv.CounterSum(t, "fencekit_writer_refusals_total", map[string]string{"lease": lease, "mechanism": mechanism, "reason": string(reason)})
}

// TestWriterCountsRefusals: a holder's write refused by the CRD's epoch rule, which no fencekit component
// sees, and one refused by the webhook are both counted in the writer's process, by mechanism.
func TestWriterCountsRefusals(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := env.NewWorker(t, ns, "worker-a"), env.NewWorker(t, ns, "worker-b")
	orders := env.Declare(t, ns, "orders", "orders-writer")
	audit := env.Declare(t, ns, "audit", "orders-writer")
	ta := a.Acquire(t, ns, "orders-writer", 5)
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, orders, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, audit, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	tb := b.Acquire(t, ns, "orders-writer", 6)
	if _, err := fencing.NewWriter(b.Client).Set(ctx, tb, orders, map[string]any{"v": 2}); err != nil {
		t.Fatal(err)
	}
	lease := ns + "/orders-writer"

	// orders is at 6: worker-a's write at 5 is refused by the CRD rule, before any webhook.
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, orders, map[string]any{"v": 3}); !fencing.IsStale(err) {
		t.Fatalf("worker-a's write of orders at 5: %v, want a stale refusal", err)
	}
	if got := writerRefusals(t, lease, fencing.MechanismCRDRule, protocol.ReasonStale); got != 1 {
		t.Errorf("fencekit_writer_refusals_total{mechanism=crd_rule} = %v after one refusal by the CRD rule, want 1", got)
	}
	// audit is still at 5: the same write passes the CRD rule and the webhook refuses it.
	if _, err := fencing.NewWriter(a.Client).Update(ctx, ta, audit, func(m map[string]any) error { m["v"] = 3; return nil }); !fencing.IsStale(err) {
		t.Fatalf("worker-a's write of audit at 5: %v, want a stale refusal", err)
	}
	if got := writerRefusals(t, lease, fencing.MechanismWebhook, protocol.ReasonStale); got != 1 {
		t.Errorf("fencekit_writer_refusals_total{mechanism=webhook} = %v after one refusal by the webhook, want 1", got)
	}
	if got := writerRefusals(t, lease, fencing.MechanismCRDRule, protocol.ReasonStale); got != 1 {
		t.Errorf("fencekit_writer_refusals_total{mechanism=crd_rule} = %v, want still 1", got)
	}
}
