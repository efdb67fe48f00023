package admission_test

// The attempt of round 13 of the independent attacker (decision 0051) that stayed open, closed by decision
// 0053. It asserts the invariant it tries to break.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
)

// round13Managers lists the managedFields managers of ConfigMap ns/name.
func round13Managers(t *testing.T, ns, name string) []string {
	t.Helper()
	var out []string
	for _, e := range readConfigMap(t, ns, name).ManagedFields {
		out = append(out, e.Manager)
	}
	return out
}

// TestRound13TheRaiseMergesForeignContentIntoTheBucket: persona: a namespace editor (RBAC on ConfigMaps, no
// token). Route: before any policy covers them, the editor creates twenty ConfigMaps with data (field
// manager "editor" owns data.k) labelled into what a FencingPolicy will select; after coverage, before any
// acquisition raised them, the editor adds nine finalizers to each, one merge patch and one new field
// manager each (free writes): ten Update entries, so the apiserver merges nothing and mergedIntoWritten
// refuses nothing. The holder's acquisition then runs fence-on-acquire, whose budgeted raise of each
// ConfigMap (a write with the token, which mergedIntoWritten never looks at) adds an eleventh Update entry,
// fencing.fencekit.io/epoch=1: the apiserver merges the oldest, "editor" with data.k, into ancient-changes,
// which fencing.HolderWrote counts as the holder's. Invariant I3 (objects no holder wrote stay within the
// budget; decision 0050: "only a write with the token makes an object count as written" meant the holder's
// content): after the fence, none of the twenty may count as written by a holder.
// Observed (d030799): WORKED. All 9x20 finalizer writes admitted (pre-00's managers [editor tool-0 .. tool-8],
// 0 of 20 written); after the holder's fence at epoch 1: 20 of 20 count as written, pre-00's managers
// [ancient-changes tool-1 .. tool-8 fencing.fencekit.io/epoch=1] (the raise's entry set the merge off).
// Closed (decision 0053): the ninth finalizer write, which brings each ConfigMap to ten Update entries and
// leaves no room for the raise's, is refused, naming the count; the raise then merges nothing.
func TestRound13TheRaiseMergesForeignContentIntoTheBucket(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	const n = 20
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pre-%02d", i), Labels: map[string]string{"app": "fenced"}},
			Data: map[string]string{"k": "editor's"}}
		if err := retryRBAC(t, "the editor's ConfigMap", func() error { return editor.Create(ctx, cm, client.FieldOwner("editor")) }); err != nil {
			t.Fatal(err)
		}
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond) // the editor's writes in later seconds than its create
	t.Cleanup(func() {
		for i := range n {
			_ = env.Client.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pre-%02d", i)}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
	refused := 0
	for i := range n {
		name := fmt.Sprintf("pre-%02d", i)
		fs := []string{}
		for k := range 9 {
			fs = append(fs, fmt.Sprintf("example.com/f-%d", k))
			patch := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": fs}})
			if err := retryRBAC(t, "the editor's finalizer", func() error {
				return editor.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
					client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fmt.Sprintf("tool-%d", k)))
			}); err != nil {
				refused++
				if refused == 1 {
					t.Logf("the editor's finalizer %d on %s: %v", k, name, round9Short(err))
				}
				if k != 8 || !strings.Contains(err.Error(), "no holder wrote, to 10 Update entries") {
					t.Errorf("the editor's finalizer %d on %s: %v, want the ninth refused for the token's room", k, name, err)
				}
				break
			}
		}
	}
	before, total := round8HolderWritten(t, ns)
	t.Logf("after coverage and the editor's nine finalizer writes on each (%d refused): %d of %d count as written; pre-00's managers %v",
		refused, before, total, round13Managers(t, ns, "pre-00"))
	if refused != n {
		t.Errorf("%d of %d editor's ninth finalizer writes refused, want all: each leaves the ConfigMap no room for the token's entry", refused, n)
	}
	tok := holder.Acquire(t, ns, appLease, 1)
	fo, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := retryRBAC(t, "the fence at epoch 1", func() error { return fo.Raise(ctx, tok) }); err != nil {
		t.Fatalf("the fence at epoch 1: %v", err)
	}
	after, total := round8HolderWritten(t, ns)
	t.Logf("after the holder's fence at epoch 1: %d of %d count as written; pre-00's managers %v", after, total, round13Managers(t, ns, "pre-00"))
	if after > before {
		t.Errorf("the editor's free writes after coverage, completed by the fence's own raise, made %d ConfigMaps no holder wrote count as holder-written: every later acquisition raises them in full, outside its budget (I3)", after-before)
	}
}
