package admission_test

// Round 17 of the independent attacker (against 5f232ff: decision 0056, onlyClearsMarks and leave). Each
// test asserts the invariant it tries to break: it fails while the attack works, and passes once the rule
// holds. Worked: TestRound17PlantedRecordAndMarkerFailEveryAcquisition and
// TestRound17PlantedInvalidRecordAndHoldFailTheFence (I2), TestRound17PlantedCurrentRecordBypassesLeave
// (I3), closed by decision 0057; the others held. All six run in make test.

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round17Planted creates ConfigMap ns/name before coverage as a namespace editor: data (manager "editor"),
// label app=fenced and the annotations given, then one label by each of the first `tools` tools (one
// Update entry each).
func round17Planted(t *testing.T, editor client.Client, ns, name string, annotations map[string]string, tools int) {
	t.Helper()
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "fenced"},
		Annotations: annotations}, Data: map[string]string{"k": "editor's"}}
	if err := retryRBAC(t, "the editor's ConfigMap", func() error { return editor.Create(ctx, cm, client.FieldOwner("editor")) }); err != nil {
		t.Fatal(err)
	}
	for k := range tools {
		if err := editor.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"tool-%d":"x"}}}`, k)), client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
			t.Fatal(err)
		}
	}
}

// round17Show describes ConfigMap ns/name's record, marker, hold and Update entries.
func round17Show(t *testing.T, ns, name string) string {
	t.Helper()
	cm := readConfigMap(t, ns, name)
	n, _ := round16Updates(cm.ManagedFields)
	return fmt.Sprintf("%s: record %q marker %q hold %q, %d Update entries, rv %s", name,
		cm.Annotations[fencingv1alpha1.ObjectEpochAnnotation], cm.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation],
		cm.Annotations[fencingv1alpha1.HoldAtEpochAnnotation], n, cm.ResourceVersion)
}

// TestRound17PlantedRecordAndMarkerFailEveryAcquisition: persona: a namespace editor (RBAC on ConfigMaps,
// no token) acting only before any policy covers its ConfigMap. Route: before coverage the editor creates
// ConfigMap "victim" with data, an epoch record it chose (fencing.fencekit.io/epoch=7, one the Lease never
// issued) and a deletion marker (delete-at-epoch=3), and labels it with nine tools: ten Update entries,
// content among them, so each raise finds raiseWouldWrite and takes leave (decision 0056). leave's merge
// patch removes the marker and hold but keeps the planted record; record() admits a token write without
// the record being the presented epoch only when the object has no record before or after
// (onlyClearsMarks) or removes one at or above the epoch, so the patch is refused, leave returns that
// error (not errLeft), and raiseWithin counts it as a failed raise: the acquisition fails. Controls: the
// same object without the marker (leave sends nothing: left), and one with record "7" and marker but one
// tool (raised by patchRecord, which replaces the record).
// Invariants: I2 (nothing a non-holder writes may make the holder's next write fail: here every
// acquisition's fence), "a failed raise fails the acquisition: no user without the token can make one
// fail" (FenceObjectsOnAcquire's doc).
// Observed (5f232ff): WORKED (1 run). The fences at epochs 1 and 2 both failed (120 ms, 32 ms): "ConfigMap
// .../victim: the write presents epoch 1 but the object would carry fencing.fencekit.io/epoch="7": a fenced
// write sets fencing.fencekit.io/epoch to the epoch it presents"; victim unchanged (record "7", marker "3",
// 10 Update entries). Controls: nomarker stayed left (record "7"), fewtools raised to "1" then "2", marker
// removed.
// Closed (decision 0057): the write that only clears the marks may leave any stored record as it is.
func TestRound17PlantedRecordAndMarkerFailEveryAcquisition(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	round17Planted(t, editor, ns, "victim", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "3"}, 9)
	round17Planted(t, editor, ns, "nomarker", map[string]string{fencingv1alpha1.ObjectEpochAnnotation: "7"}, 9)
	round17Planted(t, editor, ns, "fewtools", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "3"}, 1)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	var lines []string
	show := func(when string) {
		for _, name := range []string{"victim", "nomarker", "fewtools"} {
			lines = append(lines, when+": "+round17Show(t, ns, name))
		}
	}
	show("before the first fence")
	failed := 0
	for epoch := int64(1); epoch <= 2; epoch++ {
		_, took, err := round16Fence(t, holder, ns, epoch)
		lines = append(lines, fmt.Sprintf("fence at epoch %d after %v: %s", epoch, took.Round(time.Millisecond), testenv.ErrString(err)))
		if err != nil {
			failed++
		}
		show(fmt.Sprintf("after the fence at epoch %d", epoch))
	}
	for _, l := range lines {
		t.Log(l)
	}
	if failed > 0 {
		t.Errorf("%d of 2 acquisitions' fences failed on a ConfigMap an editor planted a record and a marker on before coverage (I2)", failed)
	}
}

// TestRound17PlantedInvalidRecordAndHoldFailTheFence: persona and route as
// TestRound17PlantedRecordAndMarkerFailEveryAcquisition, but the planted record is not an epoch at all
// ("0") and the mark is a hold (hold-at-epoch=1), so that the stored record neither parses nor is above
// the epoch. Invariant I2 (the fence at epoch 1 succeeds).
// Observed (5f232ff): WORKED (1 run). The fence at epoch 1 failed in 121 ms: "... the object would carry
// fencing.fencekit.io/epoch="0" ..."; victim unchanged (record "0", hold "1", 10 Update entries).
// Closed (decision 0057): as TestRound17PlantedRecordAndMarkerFailEveryAcquisition.
func TestRound17PlantedInvalidRecordAndHoldFailTheFence(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	round17Planted(t, editor, ns, "victim", map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation: "0", fencingv1alpha1.HoldAtEpochAnnotation: "1"}, 9)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	before := round17Show(t, ns, "victim")
	_, took, err := round16Fence(t, holder, ns, 1)
	t.Logf("before: %s; fence at epoch 1 after %v: %s; after: %s", before, took.Round(time.Millisecond), testenv.ErrString(err), round17Show(t, ns, "victim"))
	if err != nil {
		t.Errorf("the fence at epoch 1 failed on a ConfigMap an editor planted record \"0\" and a hold on before coverage (I2)")
	}
}

// TestRound17StaleOrCopiedTokenClearsTheHoldersMarker: persona: a stale replica of the holder's own user
// (token of epoch 1, the Lease now at epoch 2), and a namespace editor that copied the current token's
// field manager from managedFields. Route: the holder (epoch 2) writes its deletion marker and hold with its
// token (its DELETE / compare-and-swap pending); each attacker sends the write leave sends, a merge patch that
// only removes delete-at-epoch and hold-at-epoch, with field manager fencing.fencekit.io/epoch=N, on the
// holder's object (record 2; a left object cannot carry the holder's marker without its record). Then the
// holder's DELETE with the marker write's resourceVersion as its precondition. Invariants: I2 (the holder's DELETE succeeds), I1 (neither
// attacker's write is admitted).
// Observed (5f232ff): HELD (1 run). Stale replica (epoch 1): "stale epoch 1"; editor with the copied token
// of epoch 2: "user \"editor\" is not the user that acquired lease"; editor at epoch 1: "stale epoch 1"; the
// marks (record 2, marker 2, hold 2) stayed; the holder's DELETE with precondition 246 admitted.
func TestRound17StaleOrCopiedTokenClearsTheHoldersMarker(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok1, _, err := round16Fence(t, holder, ns, 1)
	if err != nil {
		t.Fatal(err)
	}
	hc1 := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(tok1))
	if err := retryRBAC(t, "the holder's ConfigMap", func() error {
		return hc1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm", Labels: map[string]string{"app": "fenced"}},
			Data: map[string]string{"k": "holder"}})
	}); err != nil {
		t.Fatal(err)
	}
	tok2, _, err := round16Fence(t, holder, ns, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The holder's marker and hold at epoch 2, written with its token (record 2 kept).
	raw := round11Unthrottled(t, holder.User)
	mark := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"2",%q:"2",%q:"2"}}}`, fencingv1alpha1.ObjectEpochAnnotation,
		fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}
	if err := raw.Patch(ctx, cm, client.RawPatch(types.MergePatchType, mark), client.FieldOwner(tok2.FieldManager())); err != nil {
		t.Fatalf("the holder's marker: %v", err)
	}
	markedRV := cm.ResourceVersion
	clearMarks := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null,%q:null}}}`, fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation)
	editor := round11Unthrottled(t, "editor")
	var lines []string
	admitted := 0
	for _, a := range []struct {
		who     string
		c       client.Client
		manager string
	}{
		{"stale replica (epoch 1)", raw, protocol.FieldManagerFor(1)},
		{"editor with the copied current token (epoch 2)", editor, protocol.FieldManagerFor(2)},
		{"editor with a stale token (epoch 1)", editor, protocol.FieldManagerFor(1)},
	} {
		err := a.c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}, client.RawPatch(types.MergePatchType, clearMarks), client.FieldOwner(a.manager))
		if err == nil {
			admitted++
		}
		lines = append(lines, fmt.Sprintf("%s clears the marks: %s; now %s", a.who, testenv.ErrString(err), round17Show(t, ns, "cm")))
	}
	derr := raw.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}, client.Preconditions{ResourceVersion: &markedRV})
	lines = append(lines, fmt.Sprintf("the holder's DELETE with precondition %s: %s", markedRV, testenv.ErrString(derr)))
	for _, l := range lines {
		t.Log(l)
	}
	if admitted > 0 {
		t.Errorf("%d of 3 mark-clearing writes without the current holder's token were admitted (I1)", admitted)
	}
	if derr != nil {
		t.Errorf("the holder's DELETE after its marker write failed (I2): %v", derr)
	}
}

// TestRound17LabelledInAfterCoverageFailsTheFence: persona: a namespace editor (RBAC on ConfigMaps, no
// token) acting while the policy is in force and the Lease held. Route: the editor creates a ConfigMap the
// selector does not match (no label app=fenced: no policy covers it, every write is free) with data, record
// fencing.fencekit.io/epoch=7 and delete-at-epoch=3, labels it with nine tools (ten Update entries), then
// adds the label app=fenced without a token, bringing it under the policy. Invariant I2: the next
// acquisition's fence succeeds (and, if the label-in is refused, the route is closed after coverage).
// Observed (5f232ff): HELD (1 run). The label-in without a token was refused ("this write changes
// metadata.labels.app but presents no fencing token"); the fence at epoch 2 admitted in 14 ms. The routes of
// TestRound17PlantedRecordAndMarkerFailEveryAcquisition need the editor to act before coverage.
func TestRound17LabelledInAfterCoverageFailsTheFence(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	if _, _, err := round16Fence(t, holder, ns, 1); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim", Labels: map[string]string{"app": "other"},
		Annotations: map[string]string{fencingv1alpha1.ObjectEpochAnnotation: "7", fencingv1alpha1.DeleteAtEpochAnnotation: "3"}},
		Data: map[string]string{"k": "editor's"}}
	if err := retryRBAC(t, "the editor's ConfigMap", func() error { return editor.Create(ctx, cm, client.FieldOwner("editor")) }); err != nil {
		t.Fatal(err)
	}
	for k := range 9 {
		if err := editor.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"tool-%d":"x"}}}`, k)), client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
			t.Fatal(err)
		}
	}
	lerr := editor.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"fenced"}}}`)), client.FieldOwner("tool-0"))
	t.Logf("the editor labels it in: %s; %s", testenv.ErrString(lerr), round17Show(t, ns, "victim"))
	time.Sleep(1100 * time.Millisecond)
	_, took, err := round16Fence(t, holder, ns, 2)
	t.Logf("fence at epoch 2 after %v: %s; %s", took.Round(time.Millisecond), testenv.ErrString(err), round17Show(t, ns, "victim"))
	if err != nil {
		t.Errorf("the fence at epoch 2 failed on a ConfigMap an editor labelled into coverage while the Lease was held (I2)")
	}
}

// TestRound17PlantedCurrentRecordBypassesLeave: persona: a namespace editor (RBAC on ConfigMaps, no token)
// acting only before any policy covers its ConfigMap. Route: before coverage the editor creates ConfigMap
// "victim" with data and the epoch record fencing.fencekit.io/epoch=1 (the epoch the first acquisition
// will have), and labels it with nine tools: ten Update entries, content among them. raiseObject's branch
// for a record equal to the new epoch (patchRecord nil, then patchRecord epoch) runs before the
// raiseWouldWrite check that sends such an object to leave: the second patch adds the token's entry, the
// eleventh Update entry, and the apiserver merges the oldest into ancient-changes. "victim2" carries
// record "2" (one acquisition ahead): left at epoch 1, it takes the same branch at epoch 2. Control:
// "plain", the same without the record (left). Invariant I3: an object no holder wrote must not come to count as written
// (fencing.HolderWrote) after the fence.
// Observed (5f232ff): WORKED (1 run). After the fence at epoch 1 (132 ms): victim (record "1") counts as
// written: its entries are ancient-changes (owning data.k, the editor's) + tool-1..tool-8 + the token of
// epoch 1, 10 Update entries; victim2 (record "2") and plain left, not written. After the fence at epoch 2
// (28 ms): victim2 (record "2", planted one acquisition ahead, left at epoch 1) counts as written too;
// plain still not written.
// Closed (decision 0057): a record equal to the new epoch is removed, and the object left where the raise's
// entry would make it count as written.
func TestRound17PlantedCurrentRecordBypassesLeave(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	names := []string{"victim", "victim2", "plain"}
	round17Planted(t, editor, ns, "victim", map[string]string{fencingv1alpha1.ObjectEpochAnnotation: "1"}, 9)
	round17Planted(t, editor, ns, "victim2", map[string]string{fencingv1alpha1.ObjectEpochAnnotation: "2"}, 9)
	round17Planted(t, editor, ns, "plain", nil, 9)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	var lines []string
	for _, name := range names {
		lines = append(lines, "before: "+round17Show(t, ns, name))
	}
	written := map[string]bool{}
	for epoch := int64(1); epoch <= 2; epoch++ {
		_, took, err := round16Fence(t, holder, ns, epoch)
		lines = append(lines, fmt.Sprintf("fence at epoch %d after %v: %s", epoch, took.Round(time.Millisecond), testenv.ErrString(err)))
		for _, name := range names {
			_, u := round17ConfigMap(t, ns, name)
			w := fencing.HolderWrote(u)
			if w {
				written[name] = true
			}
			lines = append(lines, fmt.Sprintf("after epoch %d: %s, written %v", epoch, round17Show(t, ns, name), w))
		}
	}
	lines = append(lines, "victim's entries: "+round14Entries(t, ns, "victim"))
	for _, l := range lines {
		t.Log(l)
	}
	if len(written) > 0 {
		t.Errorf("ConfigMaps no holder wrote count as written after the fences (I3): %v", written)
	}
}

// round17ConfigMap reads ConfigMap ns/name, also as unstructured (managedFields as the webhook sees them).
func round17ConfigMap(t *testing.T, ns, name string) (*corev1.ConfigMap, *unstructured.Unstructured) {
	t.Helper()
	cm := readConfigMap(t, ns, name)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
	if err != nil {
		t.Fatal(err)
	}
	return cm, &unstructured.Unstructured{Object: u}
}

// TestRound17KubeletStatusPlantsRecord: persona: the kubelet (system:node:n1, group system:nodes), a
// cluster controller, on a covered Pod it runs (a compromised node). Route: pods/status patches (the pod
// status strategy keeps the Pod's annotations from the request) that set fencing.fencekit.io/epoch=2, then
// delete-at-epoch=2, then hold-at-epoch=2, without a token, after the policy covers Pods and the Lease is held
// at epoch 1. A planted record one epoch ahead sends the Pod through raiseObject's equal-record branch at
// the next acquisition (TestRound17PlantedCurrentRecordBypassesLeave); a record with a marker fails leave
// (TestRound17PlantedRecordAndMarkerFailEveryAcquisition). Invariant I1 (fencekit's record keys on a covered
// object change only with the current token): each patch is refused.
// Observed (5f232ff): HELD (1 run). All 3 refused ("this write changes metadata.annotations[...] but presents
// no fencing token (field manager \"kubelet\")"); the Pod kept only record "1".
func TestRound17KubeletStatusPlantsRecord(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const kubelet = "system:node:n1"
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"*"}}}, holder.User, kubelet, "creator")
	grantObjects(t, ns, holder.User)
	grantPolicies(t, ns, holder.User)
	creator := env.ClientAs(t, "creator")
	pod, _ := round9PodWithMounts(ns, "pre", "n1", 1, 0)
	pod.Labels = map[string]string{"app": "fenced"}
	if err := retryRBAC(t, "the creator's Pod", func() error { return creator.Create(ctx, pod, client.FieldOwner("creator")) }); err != nil {
		t.Fatal(err)
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}},
		fencingv1alpha1.FencedObjects{Resource: "pods", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	if _, _, err := round16Fence(t, holder, ns, 1); err != nil {
		t.Fatal(err)
	}
	kc := round11Unthrottled(t, kubelet, "system:nodes")
	admitted := 0
	for _, key := range []string{fencingv1alpha1.ObjectEpochAnnotation, fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation} {
		err := retryRBAC(t, "the kubelet's status", func() error {
			return kc.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pre"}},
				client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"2"}},"status":{"message":"x"}}`, key)), client.FieldOwner("kubelet"))
		})
		p, _ := round16Pod(t, ns, "pre")
		if err == nil && p.Annotations[key] == "2" {
			admitted++
		}
		t.Logf("the kubelet's pods/status setting %s=2: %s; Pod annotations now %v", key, testenv.ErrString(err), p.Annotations)
	}
	if admitted > 0 {
		t.Errorf("%d of 3 kubelet status writes without a token planted fencekit's record keys on a covered Pod (I1)", admitted)
	}
}
