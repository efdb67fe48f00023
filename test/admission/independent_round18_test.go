package admission_test

// Round 18 of the independent attacker (against f98881b: decision 0057, onlyClearsMarks keeping a stored
// record, raiseObject leaving an object whose record equals the new epoch). Each test asserts the invariant
// it tries to break: it fails while the attack works, and passes once the rule holds. Worked:
// TestRound18PlantedMarkerOnDeploymentFailsTheFence (I2), TestRound18PlantedFutureMarkerDeletesWithoutToken
// (I4/I1, via the same refusal), and TestRound18PlantedCurrentRecordOnDeployment's I2 half (same route); its
// I3 half (the equal-record branch) held. All closed by decision 0058; the three run in make test.

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round18PlantedDeployment creates Deployment ns/name before coverage as a namespace editor (manager
// "editor", spec content), label app=fenced and the annotations given, then one label by each of the first
// `tools` tools (one Update entry each).
func round18PlantedDeployment(t *testing.T, editor client.Client, ns, name string, annotations map[string]string, tools int) {
	t.Helper()
	ctx := t.Context()
	dep := testenv.Deployment(ns, name)
	dep.Labels = map[string]string{"app": "fenced"}
	dep.Annotations = annotations
	if err := retryRBAC(t, "the editor's Deployment", func() error { return editor.Create(ctx, dep, client.FieldOwner("editor")) }); err != nil {
		t.Fatal(err)
	}
	for k := range tools {
		if err := editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"tool-%d":"x"}}}`, k)), client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
			t.Fatal(err)
		}
	}
}

// round18ShowDeployment describes Deployment ns/name's record, marker, hold, generation and Update entries.
func round18ShowDeployment(t *testing.T, ns, name string) string {
	t.Helper()
	d := testenv.Read[appsv1.Deployment](t, env.Client, ns, name)
	n, _ := round16Updates(d.ManagedFields)
	return fmt.Sprintf("%s: record %q marker %q hold %q, generation %d, %d Update entries, rv %s", name,
		d.Annotations[fencingv1alpha1.ObjectEpochAnnotation], d.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation],
		d.Annotations[fencingv1alpha1.HoldAtEpochAnnotation], d.Generation, n, d.ResourceVersion)
}

// TestRound18PlantedMarkerOnDeploymentFailsTheFence: persona: a namespace editor (RBAC on Deployments and
// ConfigMaps, no token) acting only before any policy covers its objects. Route: decision 0057's
// onlyClearsMarks admits leave's mark-clearing patch only if nothing but the marks (and managedFields,
// resourceVersion) changes. The Deployment strategy's PrepareForUpdate bumps metadata.generation on every
// annotation change, and a validating webhook sees the object after it: leave's patch on a Deployment
// changes metadata.generation too. So the editor creates Deployments with a planted record ("7", or "0")
// and a deletion marker or hold, labelled by nine tools (ten Update entries, spec content among them: the
// raise would write, so the fence leaves them). Control: the same on a ConfigMap (no generation).
// Invariant I2: every acquisition's fence succeeds.
// Observed (f98881b): WORKED (2 runs). The fences at epochs 1 and 2 both failed (141-154 ms, 37-54 ms):
// "Deployment .../marked: the write presents epoch 1 but the object would carry fencing.fencekit.io/epoch="7"
// ..." and the same for "held" (record "0"); marked and held unchanged (marks kept, generation 1, 10 Update
// entries). nomarks (no marks: leave sends nothing) left; the ConfigMap control cm left with its marker
// removed (rv 274 -> 283). A dry run of leave's patch on an uncovered Deployment: generation 1 -> 2, so
// onlyClearsMarks sees metadata.generation change and returns false.
// Closed (decision 0058): the marks-only write ignores the metadata the apiserver keeps (a Deployment's
// generation), and a refusal of it leaves the object instead of failing the fence.
func TestRound18PlantedMarkerOnDeploymentFailsTheFence(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	round18PlantedDeployment(t, editor, ns, "marked", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "3"}, 9)
	round18PlantedDeployment(t, editor, ns, "held", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "0", fencingv1alpha1.HoldAtEpochAnnotation: "1"}, 9)
	round18PlantedDeployment(t, editor, ns, "nomarks", map[string]string{fencingv1alpha1.ObjectEpochAnnotation: "7"}, 9)
	round17Planted(t, editor, ns, "cm", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "3"}, 9)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	var lines []string
	show := func(when string) {
		for _, name := range []string{"marked", "held", "nomarks"} {
			lines = append(lines, when+": "+round18ShowDeployment(t, ns, name))
		}
		lines = append(lines, when+": "+round17Show(t, ns, "cm"))
	}
	show("before")
	failed := 0
	for epoch := int64(1); epoch <= 2; epoch++ {
		_, took, err := round16Fence(t, holder, ns, epoch)
		lines = append(lines, fmt.Sprintf("fence at epoch %d after %v: %s", epoch, took.Round(time.Millisecond), testenv.ErrString(err)))
		if err != nil {
			failed++
		}
		show(fmt.Sprintf("after epoch %d", epoch))
	}
	// What leave's patch does to a Deployment: a server-side dry run on an uncovered copy in another namespace.
	other := env.Namespace(t)
	probe := testenv.Deployment(other, "probe")
	probe.Annotations = map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: "3"}
	if err := env.Client.Create(t.Context(), probe); err != nil {
		t.Fatal(err)
	}
	before := probe.Generation
	perr := env.Client.Patch(t.Context(), probe, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null,%q:null}}}`,
		fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation)), client.DryRunAll)
	lines = append(lines, fmt.Sprintf("dry run of leave's patch on an uncovered Deployment: %s; generation %d -> %d", testenv.ErrString(perr), before, probe.Generation))
	for _, l := range lines {
		t.Log(l)
	}
	if failed > 0 {
		t.Errorf("%d of 2 acquisitions' fences failed on Deployments an editor planted a record and a mark on before coverage (I2)", failed)
	}
}

// TestRound18PlantedFutureMarkerDeletesWithoutToken: persona: a namespace editor acting only before
// coverage (plants the object), then a stale replica of the holder's own user (token of epoch 1, a plain
// client: GET, then DELETE with the resourceVersion it read as precondition) once the Lease is at epoch 2.
// Route: the editor creates Deployment "doomed" with record "7" and deletion marker "2" (one epoch ahead of
// the first acquisition) and ten Update entries with spec content (TestRound18PlantedMarkerOnDeploymentFailsTheFence:
// leave's marker removal is refused on a Deployment, so the marker stays). The Lease is acquired at epoch 1
// and at epoch 2 (both fences run); decideDelete admits the acquiring user's DELETE when the stored marker
// is the Lease's epoch and the precondition is the stored resourceVersion: the planted marker "2" now
// qualifies, and the stale replica never wrote the marker with the current token. Control: ConfigMap "cm"
// with the same plant (leave clears its marker at epoch 1). Invariants I4/I1: a DELETE of a covered
// object needs the current holder's marker write; no DELETE without it is admitted.
// Observed (f98881b): WORKED (1 run). Both fences failed on doomed (record "7", marker "2" kept, rv 244);
// with the Lease at epoch 2 (acquired by the test helper, not released), the stale replica's plain DELETE of
// doomed with precondition 244 was admitted; its DELETE of cm (marker cleared by leave at epoch 1) was
// refused ("a DELETE carries no fencing token, so the holder first writes ... delete-at-epoch=2"). Note: a
// real elector releases the Lease after the failed fence (pkg/elector loop.go postAcquired), after which
// any DELETE is admitted by design; the window here is the fence's run while the Lease is live at epoch 2.
// Closed (decision 0058): the marks-only write ignores the metadata the apiserver keeps (a Deployment's
// generation), and a refusal of it leaves the object instead of failing the fence.
func TestRound18PlantedFutureMarkerDeletesWithoutToken(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	round18PlantedDeployment(t, editor, ns, "doomed", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "2"}, 9)
	round17Planted(t, editor, ns, "cm", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "2"}, 9)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	var lines []string
	for epoch := int64(1); epoch <= 2; epoch++ {
		_, took, err := round16Fence(t, holder, ns, epoch)
		lines = append(lines, fmt.Sprintf("fence at epoch %d after %v: %s; %s; %s", epoch, took.Round(time.Millisecond), testenv.ErrString(err),
			round18ShowDeployment(t, ns, "doomed"), round17Show(t, ns, "cm")))
	}
	stale := round11Unthrottled(t, holder.User)
	deleted := 0
	for _, obj := range []client.Object{&appsv1.Deployment{}, readConfigMap(t, ns, "cm")} {
		name := "cm"
		if _, ok := obj.(*appsv1.Deployment); ok {
			name = "doomed"
		}
		if err := stale.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
			t.Fatal(err)
		}
		rv := obj.GetResourceVersion()
		err := stale.Delete(ctx, obj, client.Preconditions{ResourceVersion: &rv})
		if err == nil {
			deleted++
		}
		lines = append(lines, fmt.Sprintf("the stale replica (user %s, no token) deletes %s with precondition %s: %s", holder.User, name, rv, testenv.ErrString(err)))
	}
	for _, l := range lines {
		t.Log(l)
	}
	if deleted > 0 {
		t.Errorf("%d covered objects deleted by a process of the acquirer's user that never wrote the current marker with a token (I4/I1)", deleted)
	}
}

// TestRound18PlantedCurrentRecordOnDeployment: persona: a namespace editor acting only before coverage.
// Route: decision 0057's equal-record branch of raiseObject (patchRecord nil, then errLeft) on Deployments,
// whose strategy bumps metadata.generation on the removal: "eq1" with record "1" and a deletion marker
// "1", "eq2" with record "2" and a hold "2" (left at epoch 1 by leave, which a Deployment's generation
// bump makes the rule refuse if it carries marks), each with ten Update entries and spec content.
// Invariants I2 (both fences succeed) and I3 (neither Deployment counts as written afterwards).
// Observed (f98881b): I2 WORKED, I3 HELD (1 run). Fence at epoch 1 (133 ms) failed on eq2 ("... would carry
// fencing.fencekit.io/epoch="2"": leave's hold removal, refused as in
// TestRound18PlantedMarkerOnDeploymentFailsTheFence); eq1 had record and marker removed (generation 2, 10
// Update entries, not written). Fence at epoch 2 admitted (23 ms): eq2's record and hold removed, 10 Update
// entries, not written. Neither counted as written after either fence.
// Closed (decision 0058): the marks-only write ignores the metadata the apiserver keeps (a Deployment's
// generation), and a refusal of it leaves the object instead of failing the fence.
func TestRound18PlantedCurrentRecordOnDeployment(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	round18PlantedDeployment(t, editor, ns, "eq1", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "1", fencingv1alpha1.DeleteAtEpochAnnotation: "1"}, 9)
	round18PlantedDeployment(t, editor, ns, "eq2", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "2", fencingv1alpha1.HoldAtEpochAnnotation: "2"}, 9)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	var lines []string
	failed := 0
	written := map[string]bool{}
	for epoch := int64(1); epoch <= 2; epoch++ {
		_, took, err := round16Fence(t, holder, ns, epoch)
		if err != nil {
			failed++
		}
		lines = append(lines, fmt.Sprintf("fence at epoch %d after %v: %s", epoch, took.Round(time.Millisecond), testenv.ErrString(err)))
		for _, name := range []string{"eq1", "eq2"} {
			u := testenv.Read[appsv1.Deployment](t, env.Client, ns, name)
			m, cerr := runtime.DefaultUnstructuredConverter.ToUnstructured(u)
			if cerr != nil {
				t.Fatal(cerr)
			}
			w := fencing.HolderWrote(&unstructured.Unstructured{Object: m})
			if w {
				written[name] = true
			}
			lines = append(lines, fmt.Sprintf("after epoch %d: %s, written %v", epoch, round18ShowDeployment(t, ns, name), w))
		}
	}
	for _, l := range lines {
		t.Log(l)
	}
	if failed > 0 {
		t.Errorf("%d of 2 fences failed (I2)", failed)
	}
	if len(written) > 0 {
		t.Errorf("Deployments no holder wrote count as written (I3): %v", written)
	}
}
