//go:build openholes

package admission_test

// Round 23's attempt that still works (independent_round23_test.go has the round): a hold planted before
// coverage, at the epoch the holder then gets without fence-on-acquire of objects, holds no cluster
// controller (docs/design/residuals.md, "A deletion marker seeded before coverage, without
// fence-on-acquire of objects").

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound23PlantedHoldAtTheHoldersEpoch: persona: an editor with RBAC on ConfigMaps, before any policy
// covers them, then a cluster controller (a kubelet) as the one that starves the holder. Route: the editor
// plants hold-at-epoch=1 (the epoch the holder is about to get) on a ConfigMap, under its own field
// manager. The policy then covers it and the holder acquires epoch 1 (without fence-on-acquire of objects,
// as Worker.Acquire and `fencekit run` do). No entry of the token owns the planted hold, so armedAt is zero
// and it never holds the cluster's controllers; and pkg/fencing's Update, reading an object that carries a
// hold, arms none after losing its compare-and-swap (isHeld: "held already"). Each controller write
// between the holder's read and its update makes the update conflict. Then the holder arms a hold itself
// with the same value (merge patch, a no-op on that field). Invariant (b): after the holder's conflict
// (its hold), a controller's write waits for the holder's retry.
// Observed (798d305, 1 run): WORKED. The editor was refused after the acquisition (the planted hold holds
// it); the kubelet's write between the holder's read and its pkg/fencing Update was admitted in each of 3
// rounds, each Update failed with a conflict, and no entry of fencing.fencekit.io/epoch=1 owned the hold
// after any of them; after the holder's own merge-patch arming (same value) still none, and the kubelet's
// write 115 ms later was admitted. Close to the residual "A deletion marker seeded before coverage, without
// fence-on-acquire of objects" (with fence-on-acquire the raise removes the hold). Wrong: request.go armedAt
// (a mark at the current epoch owned by no entry of the token holds no controller) with pkg/fencing
// client.go Update (isHeld: a hold read on the object, whoever set it, arms none).
func TestRound23PlantedHoldAtTheHoldersEpoch(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "system:node:n1"
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor", node)
	editor := env.ClientAs(t, "editor")
	kubelet := env.ClientAs(t, node, "system:nodes")
	round23Cleanup(t, ns, "planted")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "planted",
		Annotations: map[string]string{fencingv1alpha1.HoldAtEpochAnnotation: "1"}}, Data: map[string]string{"k": "v"}}
	if err := retryRBAC(t, "the editor's ConfigMap", func() error { return editor.Create(ctx, cm, client.FieldOwner("editor")) }); err != nil {
		t.Fatalf("the editor plants: %v", err)
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	enforced(t, ns, "app", nil)
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	manager := protocol.FieldManagerFor(tok.Epoch)
	key := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "planted"}}
	err := round23Probe(t, editor, ns, "planted", "example.com/editor")
	t.Logf("the editor's free write after the acquisition: %s", round9Short(err))
	for i := range 3 {
		var got corev1.ConfigMap
		if err := holder.Client.Get(ctx, client.ObjectKeyFromObject(key), &got); err != nil {
			t.Fatal(err)
		}
		err := kubelet.Patch(ctx, key.DeepCopy(), client.RawPatch(types.JSONPatchType,
			fmt.Appendf(nil, `[{"op":"add","path":"/metadata/finalizers","value":["example.com/node-%d"]}]`, i)), client.FieldOwner("kubelet"))
		t.Logf("round %d: the kubelet's write between the holder's read and its update: %s", i, round9Short(err))
		got.Data["k"] = fmt.Sprintf("holder's %d", i)
		err = fenced.Update(ctx, &got)
		t.Logf("round %d: the holder's compare-and-swap update (pkg/fencing): %s", i, round9Short(err))
		owning, _ := round23Owning(readConfigMap(t, ns, "planted").ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
		t.Logf("round %d: after it: %s", i, owning)
		if err == nil {
			break
		}
	}
	before := time.Now()
	if err := holder.Client.Patch(ctx, key.DeepCopy(), round23HoldPatch(tok.Epoch), testenv.Presenting(tok.Epoch)); err != nil {
		t.Fatalf("the holder arms its hold: %v", err)
	}
	owning, _ := round23Owning(readConfigMap(t, ns, "planted").ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
	t.Logf("after the holder's own arming (merge patch, the same value): %s", owning)
	err = round23Probe(t, kubelet, ns, "planted", "example.com/node")
	t.Logf("the kubelet's free write %v after the holder's arming: %s", time.Since(before).Round(time.Millisecond), round9Short(err))
	if !fencing.IsTokenMissing(err) {
		t.Errorf("the kubelet's free write right after the holder armed its hold (same value as a hold planted before coverage): %v, want it held", err)
	}
}
