//go:build openholes

package admission_test

// Round 24's attempt that still works (independent_round24_test.go has the round): an editor dates ten
// Update entries after the holder's arming, and the apiserver merges the arming entry into ancient-changes;
// the cluster's controllers are then not held by that hold (docs/design/residuals.md, "The cluster's
// controllers and a hold whose entry the apiserver merged").

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound24ForgedTimesMergeTheArmingEntry: persona: a namespace editor (RBAC on ConfigMaps, no token),
// acting before any hold is armed. Route: 2ce850f pins the time of an entry of a token, but the times of the
// editor's own entries stay free, and the apiserver merges the OLDEST Update entries (by time) into
// ancient-changes once an object has more than ten. The editor (1) adds ten Update entries (free finalizers,
// ten field managers): the apiserver merges the holder's content entry into ancient-changes; (2) sends its
// own entries back dated 2099 (a write that changes nothing but managedFields). The holder then arms its
// hold: its write adds a fresh entry of its token (the old one is in the bucket), the object has eleven
// Update entries, and the fresh one, dated now, is older than the editor's 2099 entries: the apiserver merges
// it into ancient-changes in the arming write itself. No entry of the token owns the hold; armedAt is zero
// and held() lets the cluster's controllers through at once. Invariant: right after a genuine arming, a
// cluster controller's write is held (up to MaxClusterControllerHold).
// Observed (2ce850f, 5 runs, the last four with this probe; numbers from one): WORKED. After the editor's ten finalizer
// writes: ancient-changes + editor-1..9, all dated 06:31:01Z (the holder's entry merged). The redating
// write (adding a finalizer as editor-9) was admitted: ancient-changes and editor-1..8 at 2099-01-01T00:00:00Z,
// editor-9 at 06:31:01Z. The holder's hold patch (epoch 1) was admitted and left "no entry of
// fencing.fencekit.io/epoch=1 owns fencing.fencekit.io/hold-at-epoch" (ancient-changes dated 06:31:01Z
// now owns it). The kubelet's dry-run finalizer write as manager editor-9 125 ms after the arming: admitted;
// on "control" 16 ms after: refused ("is held for the holder's next compare-and-swap write"). (round23Probe,
// which replaces the finalizers as a new manager, was refused on "merged" for another reason: it gives
// ancient-changes ownership of metadata.finalizers.) Wrong: request.go armedAt reads only entries whose
// manager is the token, and free.go ownershipChanges pins the time of those entries only
// (`existed && a.epochManager() && a.time != b.time`): the times of every other Update entry, ancient-changes
// included, stay free, and they order the apiserver's merge, which can take the arming write's own entry.
func TestRound24ForgedTimesMergeTheArmingEntry(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "system:node:n1"
	holder, tok := configMapHolder(t, ns, "editor", node)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	kubelet := env.ClientAs(t, node, "system:nodes")
	manager := protocol.FieldManagerFor(tok.Epoch)
	names := []string{"merged", "control"}
	round23Cleanup(t, ns, names...)
	for _, name := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "holder's"}}
		if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatalf("the holder creates %s: %v", name, err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	var fs []string
	for i := range 10 {
		fs = append(fs, fmt.Sprintf("example.com/e%d", i))
		err := retryRBAC(t, "the editor's finalizer", func() error {
			return editor.Patch(ctx, round24CM(ns, "merged"), round24Finalizers(fs), client.FieldOwner(fmt.Sprintf("editor-%d", i)))
		})
		if err != nil {
			t.Fatalf("the editor's finalizer write %d: %v", i, err)
		}
	}
	t.Logf("after the editor's ten finalizer writes: %s", round24Summary(readConfigMap(t, ns, "merged").ManagedFields))
	got := readConfigMap(t, ns, "merged")
	for i := range got.ManagedFields {
		if m := got.ManagedFields[i].Manager; strings.HasPrefix(m, "editor-") || m == admission.AncientChanges {
			got.ManagedFields[i].Time = &metav1.Time{Time: round24Far}
		}
	}
	// A write that changes nothing but managedFields times keeps the old times (the apiserver's
	// IgnoreManagedFieldsTimestampsTransformer): the redating write adds a finalizer too, as editor-9,
	// whose own entry the apiserver then dates now.
	got.Finalizers = append(got.Finalizers, "example.com/e10")
	if err := editor.Update(ctx, got, client.FieldOwner("editor-9")); err != nil {
		t.Logf("the editor's redating of its own entries: %s: the attack stops here", round9Short(err))
		return
	}
	t.Logf("after the editor redated its own entries: %s", round24Summary(readConfigMap(t, ns, "merged").ManagedFields))
	for _, name := range names {
		before := time.Now()
		if err := holder.Client.Patch(ctx, round24CM(ns, name), round23HoldPatch(tok.Epoch), testenv.Presenting(tok.Epoch)); err != nil {
			t.Fatalf("the holder arms its hold on %s: %v", name, err)
		}
		cm := readConfigMap(t, ns, name)
		owning, _ := round23Owning(cm.ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
		t.Logf("%s armed: %s; entries: %s", name, owning, round24Summary(cm.ManagedFields))
		err := round23Probe(t, kubelet, ns, name, "example.com/node")
		t.Logf("%s: the kubelet's free write (merge patch of the finalizers, manager probe) %v after the arming: %s", name, time.Since(before).Round(time.Millisecond), round9Short(err))
		// The same, adding its finalizer to the list under a manager the object has (no entry added, no
		// merge set off): only the hold can refuse it.
		err = kubelet.Patch(ctx, round24CM(ns, name), round24Finalizers(append(cm.Finalizers, "example.com/node")), client.FieldOwner("editor-9"), client.DryRunAll)
		t.Logf("%s: the kubelet's free write (merge patch adding a finalizer to the list, manager editor-9) %v after the arming: %s", name, time.Since(before).Round(time.Millisecond), round9Short(err))
		if (err == nil || !strings.Contains(err.Error(), "is held for the holder's next compare-and-swap write")) && time.Since(before) < admission.MaxClusterControllerHold {
			t.Errorf("%s: the kubelet's free write %v after the holder armed its hold was not held: %v (a genuine arming holds the cluster's controllers for %v)",
				name, time.Since(before).Round(time.Millisecond), err, admission.MaxClusterControllerHold)
		}
	}
}
