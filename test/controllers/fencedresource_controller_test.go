package controllers_test

import (
	"encoding/json"
	"fmt"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestStatusLifecycle follows one FencedResource's status through its life, as a user reading
// `kubectl get fr` would: declared before its Lease exists, the Lease acquired, the holder's write, a new
// holder's acquisition, that holder's fence-on-acquire, and a Lease whose epoch was corrupted.
func TestStatusLifecycle(t *testing.T) {
	ctx, ns := startOperator(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key := declare(t, ns, "orders", "orders-writer")

	eventuallyStatus(t, "declared with no lease: LeaseFound False (LeaseNotFound), Ready False", key,
		fencingv1alpha1.FencedResourceStatus{Conditions: leaseNotFound(ns)})

	ta := a.Acquire(t, ns, "orders-writer", 3)
	eventuallyStatus(t, "lease acquired at epoch 3: LeaseFound True, Fenced False (BehindLease)", key,
		fencingv1alpha1.FencedResourceStatus{LeaseEpoch: 3, LeaseHolder: "worker-a", Conditions: behindLease("0", "3")})
	testenv.Eventually(t, "the lease created after the resource was declared gets the finalizer", protectedIs(t, types.NamespacedName{Namespace: ns, Name: "orders-writer"}, true))

	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a3"}); err != nil {
		t.Fatalf("the holder's write at epoch 3: %v", err)
	}
	fr := eventuallyStatus(t, "the holder wrote at epoch 3: Fenced True (AtLeaseEpoch), Ready True", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 3, LeaseHolder: "worker-a",
			Conditions: atLeaseEpoch("3")})
	if fr.Generation < 2 || fr.Status.ObservedGeneration != fr.Generation {
		t.Errorf("observedGeneration %d, generation %d: want the generation of the write", fr.Status.ObservedGeneration, fr.Generation)
	}

	tb := b.Acquire(t, ns, "orders-writer", 4)
	eventuallyStatus(t, "worker-b acquired epoch 4: BehindLease until fenced", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 4, LeaseHolder: "worker-b",
			Conditions: behindLease("3", "4")})

	// worker-b's elector fences the resource (fence-on-acquire) without writing data.
	if err := fencing.FenceOnAcquire(b.Client).Raise(ctx, tb); err != nil {
		t.Fatalf("fencing at epoch 4: %v", err)
	}
	fr = eventuallyStatus(t, "fenced at epoch 4: Fenced True again", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 4, Holder: "worker-b", LeaseEpoch: 4, LeaseHolder: "worker-b",
			Conditions: atLeaseEpoch("4")})
	if string(fr.Spec.Data.Raw) != `{"v":"a3"}` {
		t.Errorf("data %s after fencing, want worker-a's {\"v\":\"a3\"} untouched", fr.Spec.Data.Raw)
	}

	// An admin (the Lease policy does not apply to system:masters) corrupts the epoch.
	setLeaseEpoch(t, types.NamespacedName{Namespace: ns, Name: "orders-writer"}, "garbage")
	eventuallyStatus(t, "the lease's epoch is garbage: LeaseFound False (LeaseInvalid)", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 4, Holder: "worker-b", LeaseHolder: "worker-b",
			Conditions: leaseInvalid(`its fencing.fencekit.io/epoch annotation "garbage" is not an epoch >= 1`)})
}

// TestReadyReasonNamesTheCause: on the apiserver, with the operator running, Ready=False carries the
// reason of its cause (LeaseNotFound, LeaseInvalid, BehindLease, AheadOfLease) and Ready=True the reason
// Fenced; the server-side table kubectl prints shows the Lease's epoch and that reason as priority-1
// columns (`kubectl get fr -o wide`).
func TestReadyReasonNamesTheCause(t *testing.T) {
	ctx, ns := startOperator(t)
	w := newWorker(t, ns, "worker-a")

	declare(t, ns, "missing", "no-such-lease")
	// A Lease of plain client-go leader election: no fencekit epoch.
	plain := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}
	if err := env.Client.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	declare(t, ns, "invalid", "plain")
	declare(t, ns, "behind", "orders-writer")
	current := declare(t, ns, "current", "orders-writer")
	tok := w.Acquire(t, ns, "orders-writer", 3)
	if _, err := fencing.NewWriter(w.Client).Set(ctx, tok, current, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	// Ahead: written at 5, then an admin (exempt from the Lease policy) sets the Lease back to epoch 2, as a
	// recreation would.
	ahead := declare(t, ns, "ahead", "recreated")
	tr := w.Acquire(t, ns, "recreated", 5)
	if _, err := fencing.NewWriter(w.Client).Set(ctx, tr, ahead, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	setLeaseEpoch(t, types.NamespacedName{Namespace: ns, Name: "recreated"}, "2")

	want := map[string]struct {
		status     metav1.ConditionStatus
		reason     string
		leaseEpoch string // the table's cell; "<none>" when unset
	}{
		"missing": {metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseNotFound, "<none>"},
		"invalid": {metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseInvalid, "<none>"},
		"behind":  {metav1.ConditionFalse, fencingv1alpha1.ReasonBehindLease, "3"},
		"current": {metav1.ConditionTrue, fencingv1alpha1.ReasonFenced, "3"},
		"ahead":   {metav1.ConditionFalse, fencingv1alpha1.ReasonAheadOfLease, "2"},
	}
	for name, wc := range want {
		testenv.Eventually(t, fmt.Sprintf("FencedResource %s Ready=%s with reason %s", name, wc.status, wc.reason), func() (bool, string) {
			var fr fencingv1alpha1.FencedResource
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &fr); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(fr.Status.Conditions, fencingv1alpha1.ConditionReady)
			if c == nil {
				return false, "no Ready condition"
			}
			return c.Status == wc.status && c.Reason == wc.reason && c.Message != "", fmt.Sprintf("Ready=%s reason %s: %q", c.Status, c.Reason, c.Message)
		})
	}

	table := serverTable(t, ns)
	cols := map[string]int{}
	for i, c := range table.ColumnDefinitions {
		cols[c.Name] = i
		if (c.Name == "Lease Epoch" || c.Name == "Reason") && c.Priority != 1 {
			t.Errorf("column %s has priority %d, want 1 (shown by -o wide only)", c.Name, c.Priority)
		}
	}
	for _, c := range []string{"Name", "Lease", "Epoch", "Ready", "Lease Epoch", "Reason"} {
		if _, ok := cols[c]; !ok {
			t.Fatalf("the table has no column %q: %v", c, table.ColumnDefinitions)
		}
	}
	seen := 0
	for _, r := range table.Rows {
		name := fmt.Sprint(r.Cells[cols["Name"]])
		wc, ok := want[name]
		if !ok {
			continue
		}
		seen++
		epoch := fmt.Sprint(r.Cells[cols["Lease Epoch"]])
		if r.Cells[cols["Lease Epoch"]] == nil {
			epoch = "<none>"
		}
		if got := fmt.Sprint(r.Cells[cols["Reason"]]); got != wc.reason || epoch != wc.leaseEpoch {
			t.Errorf("row %s: Lease Epoch %s, Reason %s; want %s, %s", name, epoch, got, wc.leaseEpoch, wc.reason)
		}
	}
	if seen != len(want) {
		t.Errorf("the table has %d of the %d resources", seen, len(want))
	}
}

// setLeaseEpoch has an admin, whom the Lease policy exempts, set the epoch annotation of the Lease key to
// epoch.
func setLeaseEpoch(t *testing.T, key types.NamespacedName, epoch string) {
	t.Helper()
	// The operator writes the Lease too (its protection finalizer), so the admin's update is sent again on
	// a conflict, read afresh, as kubectl edit would have the admin do.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := getLease(t, key)
		if err != nil {
			return err
		}
		l.Annotations[protocol.EpochAnnotation] = epoch
		return env.Client.Update(t.Context(), l)
	})
	if err != nil {
		t.Fatalf("an admin setting the epoch of lease %s to %q: %v", key, epoch, err)
	}
}

// serverTable lists the FencedResources of ns as the apiserver's Table, which is what `kubectl get` prints.
func serverTable(t *testing.T, ns string) metav1.Table {
	t.Helper()
	body, err := restClient(t).Get().AbsPath("/apis/fencing.fencekit.io/v1alpha1/namespaces/"+ns+"/fencedresources").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("listing FencedResources as a Table: %v: %s", err, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	return table
}

// restClient is an unversioned REST client of the apiserver, for what the typed clients do not read (the
// server-side Table, the apiserver's /metrics).
func restClient(t *testing.T) *rest.RESTClient {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}
