package admission_test

// Round 19 of the independent attacker (against decisions 0052-0058: Request.Racing, fillsTheTokensRoom,
// the raise's removal of spent entries, leave and onlyClearsMarks). Each test asserts the invariant it
// tries to break: it fails while the attack works, and passes once the rule holds. Worked:
// TestRound19ShiftedSpentEntryRemovesTheHoldersOtherVersionEntry and
// TestRound19ShiftedSpentEntryUnwritesTheHoldersObject (I4/I1, and an object the holder wrote no longer
// counting as written: spentEntries tested an entry's manager and operation at its index, not its apiVersion
// or subresource). Closed (decision 0059): the raise tests the whole entry it read. Held end to end:
// TestRound19ShiftedSpentEntryRemovesTheHoldersScaleEntry (same mechanism, confirmed by a diagnostic patch,
// the race not won in that direction), TestRound19LeaveOnEveryKind.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round19Group is the group of the Widget CRD: served at v1 (storage, preferred) and v1beta1 with the same
// schema, as Kubernetes requires for conversion None.
const round19Group = "round19.test.fencekit.io"

// round19Widgets creates the Widget CRD (if needed) and returns a constructor of Widget ns/name at a version.
func round19Widgets(t *testing.T) func(ns, name, version string) *unstructured.Unstructured {
	t.Helper()
	ctx := t.Context()
	schema := map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
		"spec": map[string]any{"type": "object", "properties": map[string]any{
			"size": map[string]any{"type": "integer"}, "color": map[string]any{"type": "string"}}}}}}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets." + round19Group},
		"spec": map[string]any{"group": round19Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{
				map[string]any{"name": "v1", "served": true, "storage": true, "schema": schema},
				map[string]any{"name": "v1beta1", "served": true, "storage": false, "schema": schema},
			}},
	}}
	if err := env.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, v := range []string{"v1", "v1beta1"} {
		testenv.Eventually(t, "the Widget CRD is served at "+v, func() (bool, string) {
			err := env.Client.List(ctx, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": round19Group + "/" + v, "kind": "WidgetList"}})
			return err == nil, testenv.ErrString(err)
		})
	}
	return func(ns, name, version string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(round19Group + "/" + version)
		u.SetKind("Widget")
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
}

// round19Entries describes u's managedFields: operation, manager, apiVersion, subresource, and whether the
// entry owns finalizer owned.
func round19Entries(u *unstructured.Unstructured, owned string) string {
	var out []string
	for _, e := range u.GetManagedFields() {
		s := fmt.Sprintf("%s %s %s", e.Operation, e.Manager, e.APIVersion)
		if e.Time == nil {
			s += " (no time)"
		}
		if e.Subresource != "" {
			s += " /" + e.Subresource
		}
		if e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), owned) {
			s += " [owns " + owned + "]"
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, "; ") + "]"
}

// round19TokenOwns reports whether an entry of a token's field manager owns a field whose fieldsV1 key
// contains owned.
func round19TokenOwns(u *unstructured.Unstructured, owned string) bool {
	for _, e := range u.GetManagedFields() {
		if strings.HasPrefix(e.Manager, protocol.FieldManagerPrefix) && e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), owned) {
			return true
		}
	}
	return false
}

// TestRound19ShiftedSpentEntryRemovesTheHoldersOtherVersionEntry: persona: a namespace editor (RBAC on the
// Widgets, no token), with the holder's ordinary work. Route: spentEntries (decision 0054) tests each spent
// entry's manager and operation at its index, not its apiVersion or subresource. The apiserver keeps one
// Update entry per manager, apiVersion and subresource, and sorts entries of one second by manager, then
// apiVersion: the raise of epoch 2 (through the preferred version v1) leaves entry "epoch=2 v1" owning the
// record only, and the holder's write at epoch 2 through v1beta1 (an older client) adds its cleanup
// finalizer in entry "epoch=2 v1beta1", right after it. The editor gives each Widget seven free finalizers, one tool (field manager) each (ten
// Update entries: the next raise removes the spent entry) and toggles a free finalizer by server-side apply
// ("toggler", Apply entries sort first): when the fence's read saw the Apply entry and the patch lands
// without it, every Update entry is one index lower, the test at the spent entry's index finds the holder's
// v1beta1 entry (same manager, same operation) and the raise removes it. Nobody's entry then owns the
// holder's finalizer, and the editor removes it without the token.
// Invariants: I4 (finalizers are fenced: the holder's cleanup finalizer is removed only with the token) and
// I1 (ownership: the holder's entry is removed only by a write the holder chose).
// Observed (main, 4 runs): WORKED every run. Before the fence w-00's Update entries were [epoch=1 v1beta1, epoch=2 v1,
// epoch=2 v1beta1 (owns example.com/cleanup), tool-0..6]; the control (the editor's dry-run removal of the
// finalizer) was refused ("it takes from a fenced writer's entry ownership of metadata.finalizers in the
// entry of manager \"fencing.fencekit.io/epoch=2\""). The fence at epoch 3 succeeded (393 ms, 892 ms) under
// the toggle (98-100 applies admitted, 6-7 refused by Racing); on 2 of 8 (run 1: w-04, w-06) and 1 of 8
// (run 2: w-05), 3 of 8 (run 3: w-00, w-01, w-04; fence 528 ms, 102 applies, 5 Racing) and 3 of 8 (run 4:
// w-00, w-02, w-06; fence 1.4 s, 101 applies, 6 Racing) Widgets the raise removed "epoch=2 v1beta1" (entries after: [epoch=1 v1beta1, tool-0..6,
// epoch=3 v1]), and the editor's merge patch {"metadata":{"finalizers":null}} without a token was then
// admitted on exactly those Widgets, removing example.com/cleanup; on the others it was refused as in the
// control.
func TestRound19ShiftedSpentEntryRemovesTheHoldersOtherVersionEntry(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	widget := round19Widgets(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	env.Grant(t, ns, "widgets", []rbacv1.PolicyRule{{APIGroups: []string{round19Group}, Resources: []string{"widgets"}, Verbs: []string{"*"}}}, holder.User, "editor")
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}},
		fencingv1alpha1.FencedObjects{Group: round19Group, Resource: "widgets"})
	const n = 8
	const cleanup = "example.com/cleanup"
	name := func(i int) string { return fmt.Sprintf("w-%02d", i) }
	t.Cleanup(func() {
		for i := range n {
			_ = env.Client.Patch(context.Background(), widget(ns, name(i), "v1"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
	read := func(i int) *unstructured.Unstructured {
		u := widget(ns, name(i), "v1")
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	// Epoch 1: the holder creates the Widgets through v1beta1.
	tok1, _, err := round16Fence(t, holder, ns, 1)
	if err != nil {
		t.Fatalf("the fence at epoch 1: %v", err)
	}
	hc1 := fencing.NewClient(holder.Client, tokenOf(tok1))
	for i := range n {
		w := widget(ns, name(i), "v1beta1")
		w.Object["spec"] = map[string]any{"size": int64(1)}
		if err := retryRBAC(t, "the holder's Widget", func() error { return hc1.Create(ctx, w) }); err != nil {
			t.Fatalf("the holder creates %s: %v", name(i), err)
		}
	}
	// Epoch 2: the raise (through v1), then the holder's cleanup finalizer through v1beta1.
	tok2, _, err := round16Fence(t, holder, ns, 2)
	if err != nil {
		t.Fatalf("the fence at epoch 2: %v", err)
	}
	hc2 := fencing.NewClient(holder.Client, tokenOf(tok2))
	for i := range n {
		if err := hc2.Patch(ctx, widget(ns, name(i), "v1beta1"), client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"finalizers":[%q]},"spec":{"color":"red"}}`, cleanup))); err != nil {
			t.Fatalf("the holder's finalizer on %s: %v", name(i), err)
		}
	}
	editor := round11Unthrottled(t, "editor")
	for i := range n {
		for k := range 7 {
			if err := editor.Patch(ctx, widget(ns, name(i), "v1"), client.RawPatch(types.JSONPatchType, fmt.Appendf(nil, `[{"op":"add","path":"/metadata/finalizers/-","value":%q}]`, fmt.Sprintf("example.com/tool-%d", k))),
				client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
				t.Fatalf("tool-%d on %s: %v", k, name(i), err)
			}
		}
	}
	var lines []string
	lines = append(lines, "before the fence at epoch 3: "+name(0)+" "+round19Entries(read(0), cleanup))
	// Control: the editor may not remove the holder's finalizer now (dry run).
	cerr := editor.Patch(ctx, widget(ns, name(0), "v1"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)), client.DryRunAll)
	lines = append(lines, "control: the editor's removal of the holder's finalizer before the fence (dry run): "+round9Short(cerr))
	time.Sleep(1100 * time.Millisecond)
	apply := func(ctx context.Context, i int, on bool) error {
		extra := ""
		if on {
			extra = `,"finalizers":["example.com/toggle"]`
		}
		patch := fmt.Appendf(nil, `{"apiVersion":%q,"kind":"Widget","metadata":{"name":%q,"namespace":%q%s}}`, round19Group+"/v1", name(i), ns, extra)
		return editor.Patch(ctx, widget(ns, name(i), "v1"), client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner("toggler"))
	}
	counts, stop := round15Storm(t, 8, func(ctx context.Context, g, i int) error {
		return apply(ctx, g%n, i%2 == 0)
	})
	testenv.Eventually(t, "the toggle", func() (bool, string) { return counts.admitted.Load() > 40, counts.String() })
	_, took, ferr := round16Fence(t, holder, ns, 3)
	stop()
	lines = append(lines, fmt.Sprintf("fence at epoch 3 after %v: %s; toggle: %s", took.Round(time.Millisecond), testenv.ErrString(ferr), counts))
	lost, removed := 0, 0
	for i := range n {
		u := read(i)
		owned := round19TokenOwns(u, cleanup)
		if !owned {
			lost++
		}
		lines = append(lines, fmt.Sprintf("after: %s finalizers %v, a token's entry owns %s: %v, %s", name(i), u.GetFinalizers(), cleanup, owned, round19Entries(u, cleanup)))
	}
	for i := range n {
		err := editor.Patch(ctx, widget(ns, name(i), "v1"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		if err == nil && len(read(i).GetFinalizers()) == 0 {
			removed++
			lines = append(lines, fmt.Sprintf("the editor (no token) removed the holder's finalizer from %s", name(i)))
		} else if i == 0 {
			lines = append(lines, fmt.Sprintf("the editor's removal on %s: %s", name(i), round9Short(err)))
		}
	}
	for _, l := range lines {
		t.Log(l)
	}
	if lost > 0 || removed > 0 {
		t.Errorf("after the fence at epoch 3 under the editor's apply toggle, %d of %d Widgets lost the holder's entry owning its cleanup finalizer (I1), and the editor removed that finalizer without the token from %d (I4)", lost, n, removed)
	}
}

// TestRound19ShiftedSpentEntryRemovesTheHoldersScaleEntry: persona: a namespace editor (RBAC on
// Deployments, no token). Route: as TestRound19ShiftedSpentEntryRemovesTheHoldersOtherVersionEntry, on a
// built-in kind with no second version: the apiserver keeps the holder's write through deployments/scale in
// an entry of its own (subresource "scale"), which sorts right after the same token's main entry ("" <
// "scale"). The holder creates Deployments at epoch 1; at epoch 2 the raise leaves entry "epoch=2" owning
// the record only and the holder scales each Deployment with its token (entry "epoch=2 /scale" owning
// spec.replicas). The editor adds seven free finalizers, one tool each (ten Update entries), and toggles a
// free finalizer by server-side apply while the fence of epoch 3 runs.
// Invariant I1 (ownership): the holder's managedFields entry owning spec.replicas is not removed by a write
// the holder did not choose (here: the raise, steered by the editor's toggle). The holder creates its
// Deployments by server-side apply (an Apply entry), so that the holder's scale entry, which the apiserver
// stores without a time (it sorts first among Update entries), sits right before the spent entry: the toggle
// must land between the fence's read and its patch (the index then one high). A diagnostic on d-15 (not
// toggled) sends, with the token of epoch 3, exactly the JSON patch the raise builds when its read missed the
// toggler's entry (test manager and operation at index 2, remove index 2, add the record).
// Observed (main, 4 runs with this layout): HELD end to end (0 of 8, 0 of 8, 0 of 15, 0 of 15 toggled Deployments
// lost the scale entry; the fence took 345 ms-1.6 s, 90-232 applies admitted, 4-11 refused by Racing): the
// toggle never landed in the window in that direction. (A first run with the Deployments created by a plain
// Create left an Update entry of epoch=1 between the scale entry and the spent one: no shift can reach it.) The diagnostic confirms the mechanism: that patch was admitted
// and removed "epoch=2 /scale" (owning f:replicas); d-15's Update entries after: [tool-0..6, epoch=3]. The
// diagnostic object is not counted in the assertion.
func TestRound19ShiftedSpentEntryRemovesTheHoldersScaleEntry(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}},
		fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"})
	const n = 16
	name := func(i int) string { return fmt.Sprintf("d-%02d", i) }
	t.Cleanup(func() {
		for i := range n {
			_ = env.Client.Patch(context.Background(), testenv.Deployment(ns, name(i)), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
	read := func(i int) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apps/v1")
		u.SetKind("Deployment")
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name(i)}, u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	tok1, _, err := round16Fence(t, holder, ns, 1)
	if err != nil {
		t.Fatalf("the fence at epoch 1: %v", err)
	}
	hc1 := fencing.NewClient(holder.Client, tokenOf(tok1))
	for i := range n {
		d := testenv.Deployment(ns, name(i))
		d.APIVersion, d.Kind = "apps/v1", "Deployment"
		d.Annotations = map[string]string{fencingv1alpha1.ObjectEpochAnnotation: "1"}
		body, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := retryRBAC(t, "the holder's Deployment", func() error {
			return hc1.Patch(ctx, testenv.Deployment(ns, name(i)), client.RawPatch(types.ApplyPatchType, body))
		}); err != nil {
			t.Fatalf("the holder creates %s: %v", name(i), err)
		}
	}
	tok2, _, err := round16Fence(t, holder, ns, 2)
	if err != nil {
		t.Fatalf("the fence at epoch 2: %v", err)
	}
	hc2 := fencing.NewClient(holder.Client, tokenOf(tok2))
	for i := range n {
		if err := hc2.SubResource("scale").Patch(ctx, testenv.Deployment(ns, name(i)), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`))); err != nil {
			t.Fatalf("the holder scales %s: %v", name(i), err)
		}
	}
	editor := round11Unthrottled(t, "editor")
	for i := range n {
		for k := range 7 {
			op := fmt.Appendf(nil, `[{"op":"add","path":"/metadata/finalizers/-","value":%q}]`, fmt.Sprintf("example.com/tool-%d", k))
			if k == 0 {
				op = []byte(`[{"op":"add","path":"/metadata/finalizers","value":["example.com/tool-0"]}]`)
			}
			if err := editor.Patch(ctx, testenv.Deployment(ns, name(i)), client.RawPatch(types.JSONPatchType, op),
				client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
				t.Fatalf("tool-%d on %s: %v", k, name(i), err)
			}
		}
	}
	const owned = `"f:replicas"`
	var lines []string
	lines = append(lines, "before the fence at epoch 3: "+name(0)+" "+round19Entries(read(0), owned))
	time.Sleep(1100 * time.Millisecond)
	counts, stop := round15Storm(t, n-1, func(ctx context.Context, g, i int) error {
		extra := ""
		if i%2 == 0 {
			extra = `,"finalizers":["example.com/toggle"]`
		}
		patch := fmt.Appendf(nil, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":%q%s}}`, name(g), ns, extra)
		return editor.Patch(ctx, testenv.Deployment(ns, name(g)), client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner("toggler"))
	})
	testenv.Eventually(t, "the toggle", func() (bool, string) { return counts.admitted.Load() > 40, counts.String() })
	tok3 := holder.Acquire(t, ns, appLease, 3)
	// Diagnostic on d-15 (not toggled): the JSON patch the raise sends when its read saw no Apply entry of
	// the toggler's and the toggler's entry landed before the patch: the spent entry's index is one low.
	probe := name(n - 1)
	if err := editor.Patch(ctx, testenv.Deployment(ns, probe), client.RawPatch(types.ApplyPatchType,
		fmt.Appendf(nil, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":%q,"finalizers":["example.com/toggle"]}}`, probe, ns)),
		client.FieldOwner("toggler")); err != nil {
		t.Fatalf("the toggler on %s: %v", probe, err)
	}
	diag := fmt.Appendf(nil, `[{"op":"test","path":"/metadata/managedFields/2/manager","value":"fencing.fencekit.io/epoch=2"},{"op":"test","path":"/metadata/managedFields/2/operation","value":"Update"},{"op":"remove","path":"/metadata/managedFields/2"},{"op":"add","path":"/metadata/annotations/fencing.fencekit.io~1epoch","value":"3"}]`)
	derr := round11Unthrottled(t, holder.User).Patch(ctx, testenv.Deployment(ns, probe), client.RawPatch(types.JSONPatchType, diag), client.FieldOwner(tok3.FieldManager()))
	lines = append(lines, fmt.Sprintf("diagnostic: the raise's patch with the index one low on %s: %s; now %s", probe, round9Short(derr), round19Entries(read(n-1), owned)))
	fo, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ferr := fo.Raise(ctx, tok3)
	took := time.Since(start)
	stop()
	lines = append(lines, fmt.Sprintf("fence at epoch 3 after %v: %s; toggle: %s", took.Round(time.Millisecond), testenv.ErrString(ferr), counts))
	lost := 0
	for i := range n {
		u := read(i)
		ok := round19TokenOwns(u, owned)
		if !ok && i != n-1 {
			lost++
		}
		replicas, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
		lines = append(lines, fmt.Sprintf("after: %s replicas %d, a token's entry owns spec.replicas: %v, written %v, %s", name(i), replicas, ok, fencing.HolderWrote(u), round19Entries(u, owned)))
	}
	for _, l := range lines {
		t.Log(l)
	}
	if lost > 0 {
		t.Errorf("after the fence at epoch 3 under the editor's apply toggle, %d of %d Deployments lost the holder's entry owning spec.replicas (I1, ownership)", lost, n)
	}
}

// round19Kind is one kind of object for TestRound19LeaveOnEveryKind: its group, resource, apiVersion, kind
// and the body of a minimal object (without metadata).
type round19Kind struct {
	group, resource, apiVersion, kind string
	body                              map[string]any
}

// round19Kinds are built-in kinds a FencingPolicy may cover, with a minimal valid body each.
func round19Kinds() []round19Kind {
	podSpec := map[string]any{"containers": []any{map[string]any{"name": "c", "image": "example.com/x"}}}
	template := map[string]any{"metadata": map[string]any{"labels": map[string]any{"run": "x"}}, "spec": podSpec}
	jobTemplate := map[string]any{"metadata": map[string]any{"labels": map[string]any{"run": "x"}},
		"spec": map[string]any{"containers": podSpec["containers"], "restartPolicy": "Never"}}
	selector := map[string]any{"matchLabels": map[string]any{"run": "x"}}
	return []round19Kind{
		{"", "pods", "v1", "Pod", map[string]any{"spec": podSpec}},
		{"", "services", "v1", "Service", map[string]any{"spec": map[string]any{"ports": []any{map[string]any{"port": int64(80)}}}}},
		{"", "secrets", "v1", "Secret", map[string]any{"stringData": map[string]any{"k": "v"}}},
		{"", "persistentvolumeclaims", "v1", "PersistentVolumeClaim", map[string]any{"spec": map[string]any{"accessModes": []any{"ReadWriteOnce"},
			"resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}},
		{"apps", "statefulsets", "apps/v1", "StatefulSet", map[string]any{"spec": map[string]any{"selector": selector, "serviceName": "s", "template": template}}},
		{"apps", "daemonsets", "apps/v1", "DaemonSet", map[string]any{"spec": map[string]any{"selector": selector, "template": template}}},
		{"apps", "replicasets", "apps/v1", "ReplicaSet", map[string]any{"spec": map[string]any{"selector": selector, "template": template}}},
		{"batch", "jobs", "batch/v1", "Job", map[string]any{"spec": map[string]any{"template": jobTemplate}}},
		{"batch", "cronjobs", "batch/v1", "CronJob", map[string]any{"spec": map[string]any{"schedule": "0 0 * * *", "jobTemplate": map[string]any{"spec": map[string]any{"template": jobTemplate}}}}},
		{"autoscaling", "horizontalpodautoscalers", "autoscaling/v2", "HorizontalPodAutoscaler", map[string]any{"spec": map[string]any{"maxReplicas": int64(3),
			"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}}},
		{"policy", "poddisruptionbudgets", "policy/v1", "PodDisruptionBudget", map[string]any{"spec": map[string]any{"minAvailable": int64(1), "selector": selector}}},
		{"networking.k8s.io", "ingresses", "networking.k8s.io/v1", "Ingress", map[string]any{"spec": map[string]any{"defaultBackend": map[string]any{
			"service": map[string]any{"name": "s", "port": map[string]any{"number": int64(80)}}}}}},
		{"networking.k8s.io", "networkpolicies", "networking.k8s.io/v1", "NetworkPolicy", map[string]any{"spec": map[string]any{"podSelector": selector}}},
	}
}

// TestRound19LeaveOnEveryKind: persona: a namespace editor (RBAC to create the kinds below) acting only
// before any policy covers its objects, then a stale replica of the holder's own user (plain client, no
// token: GET, then DELETE naming the resourceVersion it read). Route: decision 0058 made leave's marks-only
// write admissible on Deployments (onlyClearsMarks ignores apiserverKept metadata) and a refused one non-fatal
// (logged, object left with its marks). Any other kind whose update strategy changes something else when only
// annotations change would still have leave's write refused, its planted marker kept, and at the marker's
// epoch the stale replica's DELETE admitted (round 18's route). So the editor creates one object of each of
// thirteen built-in kinds with label app=fenced, a planted record "7" and deletion marker "2", and nine tool
// labels (ten Update entries with content: every raise leaves them). The policy then covers all thirteen; the
// Lease is acquired at epochs 1 and 2 (fence-on-acquire of objects each time).
// Invariants: I4/I1 (at epoch 2 no DELETE of a covered object without the current holder's marker write), I2
// (both fences succeed).
// Observed (main, 2 runs): HELD. All thirteen created and covered; both fences admitted (206 ms, 45 ms), each
// logging "left=13"; after epoch 2 every object had record "7", no marker, no hold, 10 Update entries,
// written false; none of the stale replica's thirteen DELETEs with a resourceVersion precondition was
// admitted.
func TestRound19LeaveOnEveryKind(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	kinds := round19Kinds()
	var rules []rbacv1.PolicyRule
	resources := []fencingv1alpha1.FencedObjects{{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}}}
	for _, k := range kinds {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{k.group}, Resources: []string{k.resource}, Verbs: []string{"*"}})
		resources = append(resources, fencingv1alpha1.FencedObjects{Group: k.group, Resource: k.resource, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	}
	env.Grant(t, ns, "kinds", rules, holder.User, "editor")
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := round11Unthrottled(t, "editor")
	obj := func(k round19Kind) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		for key, v := range k.body {
			u.Object[key] = v
		}
		u.SetAPIVersion(k.apiVersion)
		u.SetKind(k.kind)
		u.SetNamespace(ns)
		u.SetName("planted")
		return u
	}
	var lines []string
	created := map[string]bool{}
	for _, k := range kinds {
		u := obj(k)
		u.SetLabels(map[string]string{"app": "fenced"})
		u.SetAnnotations(map[string]string{fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "2"})
		if err := retryRBAC(t, "the editor's "+k.kind, func() error { return editor.Create(ctx, u, client.FieldOwner("editor")) }); err != nil {
			lines = append(lines, fmt.Sprintf("%s: not created: %s", k.kind, round9Short(err)))
			continue
		}
		created[k.kind] = true
		for i := range 9 {
			if err := editor.Patch(ctx, obj(k), client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"tool-%d":"x"}}}`, i)), client.FieldOwner(fmt.Sprintf("tool-%d", i))); err != nil {
				t.Fatalf("tool-%d on %s: %v", i, k.kind, err)
			}
		}
	}
	declarePolicy(t, ns, "app", resources...)
	time.Sleep(1100 * time.Millisecond)
	show := func(k round19Kind) (string, string) {
		u := obj(k)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return "", "read: " + err.Error()
		}
		n, _ := round16Updates(u.GetManagedFields())
		a := u.GetAnnotations()
		return a[fencingv1alpha1.DeleteAtEpochAnnotation], fmt.Sprintf("record %q marker %q hold %q, %d Update entries, written %v, rv %s",
			a[fencingv1alpha1.ObjectEpochAnnotation], a[fencingv1alpha1.DeleteAtEpochAnnotation], a[fencingv1alpha1.HoldAtEpochAnnotation], n, fencing.HolderWrote(u), u.GetResourceVersion())
	}
	failed := 0
	for epoch := int64(1); epoch <= 2; epoch++ {
		_, took, err := round16Fence(t, holder, ns, epoch)
		if err != nil {
			failed++
		}
		lines = append(lines, fmt.Sprintf("fence at epoch %d after %v: %s", epoch, took.Round(time.Millisecond), testenv.ErrString(err)))
	}
	kept := 0
	for _, k := range kinds {
		if !created[k.kind] {
			continue
		}
		marker, desc := show(k)
		if marker != "" {
			kept++
		}
		lines = append(lines, fmt.Sprintf("after epoch 2: %s: %s", k.kind, desc))
	}
	// The stale replica's DELETE of each, naming the resourceVersion it read.
	stale := round11Unthrottled(t, holder.User)
	deleted := 0
	for _, k := range kinds {
		if !created[k.kind] {
			continue
		}
		u := obj(k)
		if err := stale.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			t.Fatal(err)
		}
		rv := u.GetResourceVersion()
		err := stale.Delete(ctx, u, client.Preconditions{ResourceVersion: &rv})
		if err == nil {
			deleted++
			lines = append(lines, fmt.Sprintf("the stale replica (no token) deleted %s with precondition %s", k.kind, rv))
		}
	}
	for _, l := range lines {
		t.Log(l)
	}
	if failed > 0 || kept > 0 || deleted > 0 {
		t.Errorf("%d of 2 fences failed (I2); %d kinds kept the planted marker after two fences; %d covered objects deleted at epoch 2 without the current holder's marker write (I4/I1)", failed, kept, deleted)
	}
}

// TestRound19ShiftedSpentEntryUnwritesTheHoldersObject: persona: a namespace editor (RBAC on the Widgets, no
// token) who also created the Widgets before any policy covered them (spec.size, manager "editor"). Route:
// as TestRound19ShiftedSpentEntryRemovesTheHoldersOtherVersionEntry, one term earlier: the raise of epoch 1
// (through v1) leaves entry "epoch=1 v1" owning the annotations map and the record; the holder's write at
// epoch 1 through v1beta1 (spec.color, its cleanup finalizer) is the only token entry owning content
// ("epoch=1 v1beta1"), which makes the Widget count as written (fencing.HolderWrote: raised in full at every
// acquisition, decided on the webhook's copy). Seven free finalizers (tools) bring it to ten Update entries;
// the editor toggles a free finalizer by server-side apply while the fence of epoch 2 runs.
// Invariants: residuals.md's "Every object a holder wrote is raised" (the object must still count as written
// after the fence: I3's accounting, and the copy's safety argument rest on it), I1 (ownership) and I4 (the
// cleanup finalizer stays fenced).
// Observed (main, 2 runs): WORKED (2 of 8, then 4 of 8: u-00, u-04, u-05, u-06, fence 905 ms, 134 applies,
// 4 Racing). Run 1 in detail: before the fence 8 of 8 counted as written (u-00: [editor v1, epoch=1 v1,
// epoch=1 v1beta1 (owns example.com/cleanup), tool-0..6]). The fence at epoch 2 succeeded (534 ms; 99 applies
// admitted, 3 refused by Racing); u-02 and u-05 lost "epoch=1 v1beta1" (after: [editor, epoch=1 v1, tool-0..6,
// epoch=2 v1], the toggler's Apply entry on u-02) and count as written false although spec.color "red" is the
// holder's; the editor's tokenless {"metadata":{"finalizers":null}} was then admitted on exactly those two.
func TestRound19ShiftedSpentEntryUnwritesTheHoldersObject(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	widget := round19Widgets(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	env.Grant(t, ns, "widgets", []rbacv1.PolicyRule{{APIGroups: []string{round19Group}, Resources: []string{"widgets"}, Verbs: []string{"*"}}}, holder.User, "editor")
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	const n = 8
	const cleanup = "example.com/cleanup"
	name := func(i int) string { return fmt.Sprintf("u-%02d", i) }
	editor := round11Unthrottled(t, "editor")
	for i := range n {
		w := widget(ns, name(i), "v1")
		w.Object["spec"] = map[string]any{"size": int64(1)}
		if err := retryRBAC(t, "the editor's Widget", func() error { return editor.Create(ctx, w, client.FieldOwner("editor")) }); err != nil {
			t.Fatalf("the editor creates %s: %v", name(i), err)
		}
	}
	t.Cleanup(func() {
		for i := range n {
			_ = env.Client.Patch(context.Background(), widget(ns, name(i), "v1"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}},
		fencingv1alpha1.FencedObjects{Group: round19Group, Resource: "widgets"})
	read := func(i int) *unstructured.Unstructured {
		u := widget(ns, name(i), "v1")
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	time.Sleep(1100 * time.Millisecond)
	tok1, _, err := round16Fence(t, holder, ns, 1)
	if err != nil {
		t.Fatalf("the fence at epoch 1: %v", err)
	}
	hc1 := fencing.NewClient(holder.Client, tokenOf(tok1))
	for i := range n {
		if err := retryRBAC(t, "the holder's write", func() error {
			return hc1.Patch(ctx, widget(ns, name(i), "v1beta1"), client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"finalizers":[%q]},"spec":{"color":"red"}}`, cleanup)))
		}); err != nil {
			t.Fatalf("the holder's write of %s: %v", name(i), err)
		}
		for k := range 7 {
			if err := editor.Patch(ctx, widget(ns, name(i), "v1"), client.RawPatch(types.JSONPatchType, fmt.Appendf(nil, `[{"op":"add","path":"/metadata/finalizers/-","value":%q}]`, fmt.Sprintf("example.com/tool-%d", k))),
				client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
				t.Fatalf("tool-%d on %s: %v", k, name(i), err)
			}
		}
	}
	var lines []string
	before := 0
	for i := range n {
		if fencing.HolderWrote(read(i)) {
			before++
		}
	}
	lines = append(lines, fmt.Sprintf("before the fence at epoch 2: %d of %d written; %s %s", before, n, name(0), round19Entries(read(0), cleanup)))
	time.Sleep(1100 * time.Millisecond)
	counts, stop := round15Storm(t, n, func(ctx context.Context, g, i int) error {
		extra := ""
		if i%2 == 0 {
			extra = `,"finalizers":["example.com/toggle"]`
		}
		patch := fmt.Appendf(nil, `{"apiVersion":%q,"kind":"Widget","metadata":{"name":%q,"namespace":%q%s}}`, round19Group+"/v1", name(g), ns, extra)
		return editor.Patch(ctx, widget(ns, name(g), "v1"), client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner("toggler"))
	})
	testenv.Eventually(t, "the toggle", func() (bool, string) { return counts.admitted.Load() > 40, counts.String() })
	_, took, ferr := round16Fence(t, holder, ns, 2)
	stop()
	lines = append(lines, fmt.Sprintf("fence at epoch 2 after %v: %s; toggle: %s", took.Round(time.Millisecond), testenv.ErrString(ferr), counts))
	unwritten, removed := 0, 0
	for i := range n {
		u := read(i)
		w := fencing.HolderWrote(u)
		color, _, _ := unstructured.NestedString(u.Object, "spec", "color")
		if before == n && !w {
			unwritten++
			lines = append(lines, fmt.Sprintf("after: %s (spec.color %q, the holder's) written %v, %s", name(i), color, w, round19Entries(u, cleanup)))
		}
	}
	for i := range n {
		err := editor.Patch(ctx, widget(ns, name(i), "v1"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		if err == nil && len(read(i).GetFinalizers()) == 0 {
			removed++
			lines = append(lines, fmt.Sprintf("the editor (no token) removed the holder's finalizer from %s", name(i)))
		}
	}
	for _, l := range lines {
		t.Log(l)
	}
	if unwritten > 0 || removed > 0 {
		t.Errorf("after the fence at epoch 2 under the editor's apply toggle, %d of %d Widgets the holder wrote no longer count as written (residuals.md: every object a holder wrote is raised), and the editor removed the holder's cleanup finalizer without the token from %d (I4)", unwritten, n, removed)
	}
}
