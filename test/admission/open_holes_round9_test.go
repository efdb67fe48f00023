//go:build openholes

package admission_test

// Round 9 of the independent attacker: what stays open (docs/reliability.md, docs/design/residuals.md).
// Each test asserts the invariant it tries to break: it fails while the attack works. Run with
//
//	go test -tags openholes -count=1 -run 'TestRound9' -v ./test/admission/

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound9MergeInOneSecondRefusesWrites is TestRound9MergeAfterARaiseRefusesWrites with its writes in
// the same second: the apiserver dates managedFields entries to the second, and its merge into
// ancient-changes then takes the writer's own new entry too, which undoMerges does not put back.
// Observed (16cff93): WORKED. The Deployment controller's first status write refused: "it removes the entry
// that owns spec.template.metadata.labels.app in the entry of manager "ancient-changes"".
func TestRound9MergeInOneSecondRefusesWrites(t *testing.T) {
	operatortest.Start(t, env)
	round9MergeAfterARaise(t, 0*time.Millisecond)
}

// TestRound9PaddedDeclarationHidesItsStatus: attack on the operator's report (observability: the Fenced
// condition an admin reads to see whether a resource is fenced), by a user who may create FencedResources.
// A declaration's labels are free, within MaxFreePartEntries, and the operator's status writes are writes
// without the token like any other (its ServiceAccount is not one of the cluster's controllers): its first
// status (three conditions and its managedFields entry) grows the count. A declaration created with 127
// labels must still get the operator's status, as one without labels does.
// Observed (3283263): WORKED (4 runs). plain got 3 conditions (observedGeneration 1); padded none
// (observedGeneration 0) 3 s after; the same status by another user without the token is refused "from 128
// to 132, over the bound of 128" (127 labels + the creator's managedFields entry = 128; 3 runs).
func TestRound9PaddedDeclarationHidesItsStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	declarer := round9Editor(t, ns, "declarer")
	labels := map[string]string{}
	for i := range 127 {
		labels[fmt.Sprintf("l%03d", i)] = ""
	}
	for name, l := range map[string]map[string]string{"plain": nil, "padded": labels} {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: appLease}}
		if err := retryRBAC(t, "the declaration "+name, func() error { return declarer.Create(ctx, fr) }); err != nil {
			t.Fatalf("declaring %s: %v", name, err)
		}
	}
	testenv.Eventually(t, "the operator reports declaration plain", func() (bool, string) {
		got := get(t, types.NamespacedName{Namespace: ns, Name: "plain"})
		return len(got.Status.Conditions) > 0, fmt.Sprintf("%d conditions", len(got.Status.Conditions))
	})
	time.Sleep(3 * time.Second)
	plain := get(t, types.NamespacedName{Namespace: ns, Name: "plain"})
	padded := get(t, types.NamespacedName{Namespace: ns, Name: "padded"})
	t.Logf("plain: %d conditions, observedGeneration %d; padded (127 labels): %d conditions, observedGeneration %d",
		len(plain.Status.Conditions), plain.Status.ObservedGeneration, len(padded.Status.Conditions), padded.Status.ObservedGeneration)
	// The same status as a write of another user without the token, to see the refusal the operator gets.
	conds := []any{}
	for _, ty := range []string{"Ready", "LeaseFound", "Fenced"} {
		conds = append(conds, map[string]any{"type": ty, "status": "False", "reason": "LeaseNotFound", "message": "m", "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)})
	}
	serr := declarer.Status().Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "padded"}},
		client.RawPatch(types.MergePatchType, mustJSON(t, map[string]any{"status": map[string]any{"observedGeneration": 1, "conditions": conds}})))
	t.Logf("the same status written by another user without the token: %v", round9Short(serr))
	if len(padded.Status.Conditions) == 0 {
		t.Errorf("the operator could not report declaration padded (127 free labels): its status write was refused by the bound on writes without the token")
	}
}
