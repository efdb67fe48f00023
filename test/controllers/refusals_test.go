package controllers_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// refusals reads fencekit_webhook_admission_refusals_total{webhook,namespace,lease,reason} from
// controller-runtime's registry, which the in-process operator's webhooks count into.
func refusals(t *testing.T, webhook, namespace, lease string, reason protocol.Reason) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counter := func(name string, want map[string]string) float64 {
		var sum float64
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				match := true
				for _, l := range m.GetLabel() {
					if v, ok := want[l.GetName()]; ok && v != l.GetValue() {
						match = false
					}
				}
				if match {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	return counter("fencekit_webhook_admission_refusals_total", map[string]string{"webhook": webhook, "namespace": namespace, "lease": lease, "reason": string(reason)})
}

// eventuallyEvent waits for a Warning Write Event (events.k8s.io/v1) regarding the FencedResource name
// with the given reason and note.
func eventuallyEvent(t *testing.T, ns, name string, reason protocol.Reason, note string) {
	t.Helper()
	eventuallyEventOn(t, ns, "FencedResource", name, reason, "Write", note)
}

// refusalEvents lists the Warning Events (events.k8s.io/v1) of namespace ns recorded by fencekit's
// webhooks, as "reason action kind/name: note".
func refusalEvents(t *testing.T, ns string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Type == "Warning" && e.ReportingController == "fencekit-webhook" {
			out = append(out, fmt.Sprintf("%s %s %s/%s: %s", e.Reason, e.Action, e.Regarding.Kind, e.Regarding.Name, e.Note))
		}
	}
	return out
}

// eventuallyEventOn waits for a Warning Event regarding the object kind/name with the given reason,
// action and note.
func eventuallyEventOn(t *testing.T, ns, kind, name string, reason protocol.Reason, action, note string) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("a Warning %s Event on %s %s", reason, kind, name), func() (bool, string) {
		var list eventsv1.EventList
		if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			seen = append(seen, fmt.Sprintf("%s %s %s/%s %q", e.Type, e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Note))
			if e.Type == "Warning" && e.Reason == string(reason) && e.Action == action && e.Note == note &&
				e.Regarding.Kind == kind && e.Regarding.Name == name && e.Regarding.Namespace == ns {
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
	testenv.Eventually(t, fmt.Sprintf("FencedResource %s's status at lease epoch %d", key, epoch), func() (bool, string) {
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

// takenOverUnfenced sets the scene of a late write: worker-a (a) wrote FencedResource orders (key) with its
// token ta of Lease orders-writer at epoch 5, then worker-b took the Lease over (token tb, epoch 6) without
// fencing the resource, and the operator has seen epoch 6. worker-a's late write at epoch 5 passes the
// CRD's own rule (the resource is at 5) and reaches the webhook, which knows the Lease is at 6.
func takenOverUnfenced(t *testing.T) (ns string, key types.NamespacedName, a worker, ta, tb elector.Token) {
	t.Helper()
	ns = env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key = declare(t, ns, "orders", "orders-writer")
	ta = a.Acquire(t, ns, "orders-writer", 5)
	if _, err := fencing.NewWriter(a.Client).Set(t.Context(), ta, key, map[string]any{"v": "a5"}); err != nil {
		t.Fatal(err)
	}
	tb = b.Acquire(t, ns, "orders-writer", 6)
	settled(t, key, 6)
	return ns, key, a, ta, tb
}

// TestRefusedWritesAreReported: each write the webhook refuses leaves a Warning Event on the resource,
// with the fencing reason and the refusal's message, and counts in
// fencekit_webhook_admission_refusals_total{webhook="fencedresources"}.
func TestRefusedWritesAreReported(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns, key, a, ta, tb := takenOverUnfenced(t)

	_, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5-late"})
	if !fencing.IsStale(err) {
		t.Fatalf("worker-a's late write: got %v, want a stale refusal", err)
	}
	eventuallyEvent(t, ns, "orders", protocol.ReasonStale, "FencedResource "+ns+"/orders: stale epoch 5: lease orders-writer is at epoch 6, held by worker-b")
	if got := refusals(t, "fencedresources", ns, "orders-writer", protocol.ReasonStale); got != 1 {
		t.Errorf("fencekit_webhook_admission_refusals_total{reason=%q} = %v after one refused write, want 1", protocol.ReasonStale, got)
	}

	// worker-a presents worker-b's token: the right epoch, the wrong user.
	_, err = fencing.NewWriter(a.Client).Set(ctx, tb, key, map[string]any{"v": "copied"})
	if !fencing.IsNotHolder(err) {
		t.Fatalf("worker-a's write with worker-b's token: got %v, want a not-holder refusal", err)
	}
	eventuallyEvent(t, ns, "orders", protocol.ReasonNotHolder,
		fmt.Sprintf(`user "worker-a-user" is not the user that acquired lease orders-writer at epoch 6 ("worker-b-user"): only the holder worker-b may write FencedResource %s/orders`, ns))
	if got := refusals(t, "fencedresources", ns, "orders-writer", protocol.ReasonNotHolder); got != 1 {
		t.Errorf("fencekit_webhook_admission_refusals_total{reason=%q} = %v after one refused write, want 1", protocol.ReasonNotHolder, got)
	}
	if got := refusals(t, "fencedresources", ns, "orders-writer", protocol.ReasonStale); got != 1 {
		t.Errorf("fencekit_webhook_admission_refusals_total{reason=%q} = %v, want still 1", protocol.ReasonStale, got)
	}
}

// TestDryRunRefusalsLeaveNoTrace: the webhooks declare sideEffects: None, so a dry-run write they refuse
// records no Event and counts nothing; the same refusal without dry run does both.
func TestDryRunRefusalsLeaveNoTrace(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns, _, a, ta, tb := takenOverUnfenced(t)

	write := func(tok elector.Token, opts ...client.PatchOption) error {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"epoch":%d,"data":{"v":"late"}}}`,
			fencingv1alpha1.WriterAnnotation, tok.Holder, tok.Epoch)
		return a.Client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(patch)), append(opts, testenv.Presenting(tok.Epoch))...)
	}
	// A dry run of worker-a's stale write: refused, but it must leave nothing behind.
	if err := write(ta, client.DryRunAll); !fencing.IsStale(err) {
		t.Fatalf("worker-a's dry-run stale write: got %v, want a stale refusal", err)
	}
	if got := refusals(t, "fencedresources", ns, "orders-writer", protocol.ReasonStale); got != 0 {
		t.Errorf("a refused dry run counted: fencekit_webhook_admission_refusals_total{reason=%q} = %v, want 0", protocol.ReasonStale, got)
	}
	// A real refusal afterwards (another reason, so another Event): once its Event is there, the dry run's
	// would be too, as the recorder posts Events in order.
	if err := write(tb); !fencing.IsNotHolder(err) {
		t.Fatalf("worker-a's write with worker-b's token: got %v, want a not-holder refusal", err)
	}
	eventuallyEvent(t, ns, "orders", protocol.ReasonNotHolder,
		fmt.Sprintf(`user "worker-a-user" is not the user that acquired lease orders-writer at epoch 6 ("worker-b-user"): only the holder worker-b may write FencedResource %s/orders`, ns))
	if got := refusals(t, "fencedresources", ns, "orders-writer", protocol.ReasonNotHolder); got != 1 {
		t.Errorf("fencekit_webhook_admission_refusals_total{reason=%q} = %v after one refused write, want 1", protocol.ReasonNotHolder, got)
	}
	for _, e := range refusalEvents(t, ns) {
		if strings.HasPrefix(e, string(protocol.ReasonStale)) {
			t.Errorf("the refused dry run left an Event: %s", e)
		}
	}
}

// TestObjectRefusalsAreReported: a write of an object a FencingPolicy declares, refused by the objects
// webhook, leaves a Warning Event on that object and counts in
// fencekit_webhook_admission_refusals_total{webhook="objects"}; a refused dry run does neither.
func TestObjectRefusalsAreReported(t *testing.T) {
	ctx, ns := startOperator(t)
	w := newWorker(t, ns, "app")
	w.Acquire(t, ns, "app-writer", 3)
	p := &fencingv1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec:       fencingv1alpha1.FencingPolicySpec{LeaseName: "app-writer", Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps"}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "v"}}
	}
	// The operator configures the webhook for the namespace: wait until a dry run is refused by it.
	testenv.Eventually(t, "the objects webhook refuses an unfenced ConfigMap create", func() (bool, string) {
		err := env.Client.Create(ctx, cm("probe"), client.DryRunAll)
		return fencing.IsTokenMissing(err), fmt.Sprint(err)
	})
	if got := refusals(t, "objects", ns, "app-writer", protocol.ReasonTokenMissing); got != 0 {
		t.Errorf("refused dry runs counted: fencekit_webhook_admission_refusals_total{webhook=\"objects\"} = %v, want 0", got)
	}
	if err := env.Client.Create(ctx, cm("settings")); !fencing.IsTokenMissing(err) {
		t.Fatalf("an unfenced ConfigMap create: got %v, want a token-missing refusal", err)
	}
	if got := refusals(t, "objects", ns, "app-writer", protocol.ReasonTokenMissing); got != 1 {
		t.Errorf("fencekit_webhook_admission_refusals_total{webhook=\"objects\"} = %v after one refused write, want 1", got)
	}
	var note string
	testenv.Eventually(t, "a Warning Event on ConfigMap settings", func() (bool, string) {
		for _, e := range refusalEvents(t, ns) {
			if strings.HasPrefix(e, string(protocol.ReasonTokenMissing)+" Write ConfigMap/settings: ") {
				note = e
				return true, ""
			}
		}
		return false, fmt.Sprint(refusalEvents(t, ns))
	})
	if !strings.Contains(note, "presents no fencing token") {
		t.Errorf("the Event's note does not say why: %s", note)
	}
	for _, e := range refusalEvents(t, ns) {
		if strings.Contains(e, "ConfigMap/probe") {
			t.Errorf("a refused dry run left an Event: %s", e)
		}
	}
}

// apiserverCounter sums the samples of the kube-apiserver's own metric name whose labels include all of
// labels (`key="value"`), from its /metrics endpoint.
func apiserverCounter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	body, err := restClient(t).Get().AbsPath("/metrics").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading the apiserver's metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(line, l)
		}
		if !match {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("parsing %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestRefusalsInsideTheApiserverAreCounted: the refusals no fencekit component sees, by the CRD's epoch
// rule and by the Lease policy, move the kube-apiserver's own counters that docs/design/observability.md points to:
// apiserver_request_total{resource="fencedresources",code="422"} and
// apiserver_validating_admission_policy_check_total{policy="fencekit-fenced-leases",enforcement_action="deny"}.
func TestRefusalsInsideTheApiserverAreCounted(t *testing.T) {
	ctx, ns := startOperator(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key := declare(t, ns, "orders", "orders-writer")
	ta := a.Acquire(t, ns, "orders-writer", 5)
	tb := b.Acquire(t, ns, "orders-writer", 6)
	if _, err := fencing.NewWriter(b.Client).Set(ctx, tb, key, map[string]any{"v": "b6"}); err != nil {
		t.Fatal(err)
	}

	crdRule := func() float64 {
		return apiserverCounter(t, "apiserver_request_total", `resource="fencedresources"`, `code="422"`, `verb="PATCH"`)
	}
	before := crdRule()
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5"}); !fencing.IsStale(err) {
		t.Fatalf("worker-a's write at 5 of a resource at 6: %v, want a stale refusal by the CRD rule", err)
	}
	if got := crdRule() - before; got != 1 {
		t.Errorf("apiserver_request_total{resource=fencedresources,code=422,verb=PATCH} rose by %v after one refusal by the CRD rule, want 1", got)
	}

	policy := func() float64 {
		return apiserverCounter(t, "apiserver_validating_admission_policy_check_total", `policy="fencekit-fenced-leases"`, `enforcement_action="deny"`)
	}
	before = policy()
	// worker-a renews worker-b's Lease at its epoch: only the acquirer may, the Lease policy refuses it.
	var l coordinationv1.Lease
	if err := a.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders-writer"}, &l); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l.Spec.RenewTime = &now
	if err := a.Client.Update(ctx, &l, testenv.Presenting(6)); err == nil {
		t.Fatal("worker-a renewed worker-b's Lease: admitted, want refused by the Lease policy")
	} else {
		t.Logf("refused: %v", err)
	}
	if got := policy() - before; got != 1 {
		t.Errorf("apiserver_validating_admission_policy_check_total{policy=fencekit-fenced-leases,enforcement_action=deny} rose by %v after one refusal, want 1", got)
	}
}
