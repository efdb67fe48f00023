package admission_test

// Round 16 of the independent attacker (against b725199: decision 0055 and the raise's cap). Each test
// asserts the invariant it tries to break: it fails while the attack works, and passes once the rule holds.
// TestRound16PlantedMarkerOnALeftObjectAuthorisesAStaleDelete worked, closed by decision 0056; the others
// held. All four run in make test.

import (
	"context"
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
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round16Fence acquires Lease appLease at epoch for w and runs the objects' fence-on-acquire, returning the
// token and how long the fence took.
func round16Fence(t *testing.T, w worker, ns string, epoch int64) (elector.Token, time.Duration, error) {
	t.Helper()
	tok := w.Acquire(t, ns, appLease, epoch)
	fo, err := fencing.FenceObjectsOnAcquireForConfig(w.Config)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = retryRBAC(t, fmt.Sprintf("the fence at epoch %d", epoch), func() error { return fo.Raise(t.Context(), tok) })
	return tok, time.Since(start), err
}

// round16Pod reads Pod ns/name as unstructured (managedFields decoded as the webhook sees them).
func round16Pod(t *testing.T, ns, name string) (*corev1.Pod, *unstructured.Unstructured) {
	t.Helper()
	var pod corev1.Pod
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
		t.Fatal(err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pod)
	if err != nil {
		t.Fatal(err)
	}
	return &pod, &unstructured.Unstructured{Object: u}
}

// round16Updates counts the Update entries of managedFields es.
func round16Updates(es []metav1.ManagedFieldsEntry) (n int, managers []string) {
	for _, e := range es {
		if e.Operation == metav1.ManagedFieldsOperationUpdate {
			n++
			managers = append(managers, e.Manager+map[bool]string{true: "/" + e.Subresource}[e.Subresource != ""])
		}
	}
	return n, managers
}

// TestRound16KubeletFilledPodLeftAtEveryAcquisition: persona: the kubelet (system:node:n1, group
// system:nodes), a cluster controller, which fillsTheTokensRoom no longer holds to the room (change 4 of
// decision 0055), with a namespace editor that acted before coverage. Route: a Pod created before any
// policy covers it (manager "creator" owns its spec), labelled by eight tools (nine Update entries); a
// policy then covers Pods; the kubelet's first pods/status patch adds the tenth Update entry (admitted: the
// kubelet is exempt). Every acquisition's raise then finds ten Update entries, no spent entry and content
// among them (raiseWouldWrite) and leaves the Pod (errLeft): no raise ever orders a stale write to it.
// Invariants: I3 (the Pod, which no holder wrote, must not come to count as written), I1 (after each
// acquisition a write at the previous epoch is refused: the left Pod's writes are decided on a quorum
// read), I2/I4 (the holder's fenced Delete of the left Pod succeeds within fencing.DefaultWriteTimeout).
// Observed (b725199): HELD (1 run). The kubelet's first status brought the Pod to 10 Update entries (admitted);
// the fences at epochs 1-4 (22-75 ms) each left it (record "", 10 Update entries, never written); the writes
// at the previous epoch after each acquisition were refused ("stale epoch"), 3 of 3; the holder's Delete at
// epoch 4 admitted in 22 ms. The Pod is left at every acquisition with nobody writing during it.
func TestRound16KubeletFilledPodLeftAtEveryAcquisition(t *testing.T) {
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
	const name = "pre"
	pod, _ := round9PodWithMounts(ns, name, "n1", 1, 0)
	pod.Labels = map[string]string{"app": "fenced"}
	if err := retryRBAC(t, "the creator's Pod", func() error { return creator.Create(ctx, pod, client.FieldOwner("creator")) }); err != nil {
		t.Fatal(err)
	}
	for k := range 8 {
		if err := creator.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"tool-%d":"x"}}}`, k)), client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
			t.Fatal(err)
		}
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}},
		fencingv1alpha1.FencedObjects{Resource: "pods", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	kc := round11Unthrottled(t, kubelet, "system:nodes")
	if err := retryRBAC(t, "the kubelet's first status", func() error {
		return kc.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"message":"start"}}`)), client.FieldOwner("kubelet"))
	}); err != nil {
		t.Fatalf("the kubelet's first status: %v", round9Short(err))
	}
	p, u := round16Pod(t, ns, name)
	n, managers := round16Updates(p.ManagedFields)
	t.Logf("before any raise: %d Update entries %v, written %v", n, managers, fencing.HolderWrote(u))
	time.Sleep(1100 * time.Millisecond)
	var lines []string
	written, staleAdmitted := 0, 0
	var prev elector.Token
	for epoch := int64(1); epoch <= 4; epoch++ {
		tok, took, err := round16Fence(t, holder, ns, epoch)
		if err != nil {
			t.Fatalf("the fence at epoch %d: %v", epoch, err)
		}
		p, u := round16Pod(t, ns, name)
		n, _ := round16Updates(p.ManagedFields)
		if fencing.HolderWrote(u) {
			written++
		}
		line := fmt.Sprintf("epoch %d: fence %v, record %q, %d Update entries, written %v", epoch, took.Round(time.Millisecond),
			p.Annotations[fencingv1alpha1.ObjectEpochAnnotation], n, fencing.HolderWrote(u))
		if prev.Epoch > 0 {
			sc := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(prev))
			err := sc.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"activeDeadlineSeconds":%d}}`, 1000+epoch)))
			if err == nil {
				staleAdmitted++
			}
			line += fmt.Sprintf("; stale write at epoch %d: %s", prev.Epoch, testenv.ErrString(err))
		}
		lines = append(lines, line)
		prev = tok
	}
	for _, l := range lines {
		t.Log(l)
	}
	hc := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(prev))
	dctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
	start := time.Now()
	derr := hc.Delete(dctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	cancel()
	t.Logf("the holder's Delete at epoch %d after %v: %s", prev.Epoch, time.Since(start).Round(time.Millisecond), testenv.ErrString(derr))
	if written > 0 {
		t.Errorf("the kubelet-filled Pod no holder wrote counted as written after %d of 4 raises (I3)", written)
	}
	if staleAdmitted > 0 {
		t.Errorf("%d writes at the previous epoch to the left Pod were admitted after the acquisition (I1)", staleAdmitted)
	}
	if derr != nil {
		t.Errorf("the holder's Delete of the left Pod failed (I2/I4): %v", derr)
	}
}

// TestRound16SustainedApplyToggleLeavesObjects: persona: a namespace editor (RBAC on ConfigMaps, no token)
// that acted before coverage and then toggles a free finalizer by server-side apply, from eight goroutines
// on two ConfigMaps, so that each raise's JSON patch fails on all five tries (decision 0055's residual) and
// the raise leaves the object (errLeft). Route: ConfigMaps with the editor's data and eight tools' labels
// before coverage (nine Update entries); the first raise adds the tenth (spent after the next raise); under
// the toggle, the raises at epochs 2-5 must drop the spent entry in a JSON patch whose index tests the toggle
// keeps moving. Invariants: I3 (no ConfigMap no holder wrote counts as written after any raise); I1 (a write
// at the previous epoch to a left ConfigMap, sent right after each acquisition, is refused); I2 (the last
// holder's first write to each toggled ConfigMap, under the toggle, succeeds within DefaultWriteTimeout).
// Observed (b725199): HELD (1 run). 564 applies admitted, 29 refused by Racing; the fences at epochs 2-5
// (155-916 ms) raised all 4 ConfigMaps every time (0 left: the re-read retries succeeded), 0 of 4 written
// throughout; the holder's first writes at epoch 5 admitted in 66 and 209 ms.
func TestRound16SustainedApplyToggleLeavesObjects(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	const n = 4
	name := func(i int) string { return fmt.Sprintf("pre-%02d", i) }
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i), Labels: map[string]string{"app": "fenced"}},
			Data: map[string]string{"k": "editor's"}}
		if err := retryRBAC(t, "the editor's ConfigMap", func() error { return editor.Create(ctx, cm, client.FieldOwner("editor")) }); err != nil {
			t.Fatal(err)
		}
		for k := range 8 {
			if err := editor.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)}},
				client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"labels":{"tool-%d":"x"}}}`, k)), client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
				t.Fatal(err)
			}
		}
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	t.Cleanup(func() {
		for i := range n {
			_ = env.Client.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
	time.Sleep(1100 * time.Millisecond)
	prev, _, err := round16Fence(t, holder, ns, 1)
	if err != nil {
		t.Fatalf("the fence at epoch 1: %v", err)
	}
	before, total := round8HolderWritten(t, ns)
	tc := round11Unthrottled(t, "editor")
	time.Sleep(1100 * time.Millisecond)
	// Eight goroutines on the first two ConfigMaps (four each); the other two are the control.
	counts, stop := round15Storm(t, 8, func(ctx context.Context, g, i int) error {
		return round15ApplyEntry(ctx, tc, ns, name(g%2), (i/2)%2 == 0)
	})
	testenv.Eventually(t, "the toggle", func() (bool, string) { return counts.admitted.Load() > 40, counts.String() })
	var lines []string
	left, staleAdmitted, maxWritten := 0, 0, before
	for epoch := int64(2); epoch <= 5; epoch++ {
		tok, took, err := round16Fence(t, holder, ns, epoch)
		if err != nil {
			t.Fatalf("the fence at epoch %d: %v", epoch, err)
		}
		sc := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(prev))
		var recs []string
		stale := 0
		for i := range n {
			cm := readConfigMap(t, ns, name(i))
			rec := cm.Annotations[fencingv1alpha1.ObjectEpochAnnotation]
			if rec != fmt.Sprint(epoch) {
				left++
				err := sc.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)}},
					client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"stale":"%d"}}`, prev.Epoch)))
				if err == nil {
					stale++
				}
			}
			recs = append(recs, name(i)+"="+rec)
		}
		staleAdmitted += stale
		w, _ := round8HolderWritten(t, ns)
		maxWritten = max(maxWritten, w)
		lines = append(lines, fmt.Sprintf("epoch %d: fence %v, records %v, %d written, stale writes to left ones admitted %d", epoch, took.Round(time.Millisecond), recs, w, stale))
		prev = tok
		time.Sleep(300 * time.Millisecond)
	}
	// The last holder's first write to each toggled ConfigMap, under the toggle.
	hc := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(prev))
	failed := 0
	for i := range 2 {
		wctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		start := time.Now()
		err := hc.Patch(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name(i)}},
			client.RawPatch(types.MergePatchType, []byte(`{"data":{"holder":"first"}}`)))
		cancel()
		if err != nil {
			failed++
		}
		lines = append(lines, fmt.Sprintf("holder's first write to %s at epoch %d: %v: %s", name(i), prev.Epoch, time.Since(start).Round(time.Millisecond), testenv.ErrString(err)))
	}
	stop()
	for _, l := range lines {
		t.Log(l)
	}
	t.Logf("toggle: %s; before the toggle %d of %d written; %d objects left over 4 raises", counts, before, total, left)
	t.Logf("pre-00's entries %s", round14Entries(t, ns, name(0)))
	if maxWritten > before {
		t.Errorf("under the toggle, %d ConfigMaps no holder wrote came to count as written (I3)", maxWritten-before)
	}
	if staleAdmitted > 0 {
		t.Errorf("%d writes at the previous epoch to left ConfigMaps were admitted after the acquisition (I1)", staleAdmitted)
	}
	if failed > 0 {
		t.Errorf("%d of the holder's first writes to the toggled ConfigMaps failed (I2)", failed)
	}
}

// round16Planted creates ConfigMap ns/name before coverage as a namespace editor: data (manager "editor"),
// label app=fenced and the deletion marker delete-at-epoch=marker, then one label by each of the first `tools` tools
// (one Update entry each).
func round16Planted(t *testing.T, editor client.Client, ns, name, marker string, tools int) {
	t.Helper()
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "fenced"},
		Annotations: map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: marker}}, Data: map[string]string{"k": "editor's"}}
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

// TestRound16PlantedMarkerOnALeftObjectAuthorisesAStaleDelete: persona: a namespace editor acting only
// before coverage, and a stale replica of the holder's own user (app-operator-user, holder identity
// replica-a, which lost the Lease to replica-b at the next epoch) deleting with a plain client. Route:
// before any policy covers it, the editor creates ConfigMap "victim" with data and the deletion marker
// fencing.fencekit.io/delete-at-epoch=2, and labels it with nine tools: ten Update entries, content among
// them. Each raise finds ten Update entries, no spent one, and content a merge would count as written
// (raiseWouldWrite), so it leaves the object (errLeft) at every acquisition without anyone writing during
// it, and the planted marker is never removed (patchRecord and patchRecordDropping are what remove a marker
// the Lease never issued). Once replica-b acquires epoch 2, the planted marker is "the Lease's current
// epoch": decideDelete admits a DELETE by the acquiring user that names the stored resourceVersion as its
// precondition, which replica-a, stale at epoch 1 and never able to write the current marker, does after a
// plain Get. Control: ConfigMap "control", planted the same way with one tool (raised, marker removed).
// Invariant I4/I1: no delete of a fenced object without the current holder's token (a stale replica's
// DELETE must be refused, as it is on the control).
// Observed (b725199): WORKED in 3 of 3 runs. victim: 10 Update entries, record "" and marker "2" after the
// fences at epochs 1 and 2 (left both times); replica-a's plain DELETE with the precondition it read was
// admitted. control: raised (record "1", then "2"), marker removed; the same DELETE refused ("a DELETE
// carries no fencing token, so the holder first writes the annotation ... delete-at-epoch=2").
// Closed (decision 0056): fence-on-acquire clears a marker or hold from an object it leaves, with a write
// that raises nothing and adds no managedFields entry (the rule admits it from the acquirer: onlyClearsMarks).
func TestRound16PlantedMarkerOnALeftObjectAuthorisesAStaleDelete(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a := newWorker(t, ns, "app-operator")
	a.LeaseDuration = 10 * time.Minute
	a.Fences.Objects = true
	a.Holder = "replica-a"
	b := a
	b.Holder = "replica-b"
	grantObjects(t, ns, a.User, "editor")
	grantPolicies(t, ns, a.User)
	editor := env.ClientAs(t, "editor")
	round16Planted(t, editor, ns, "victim", "2", 9)
	round16Planted(t, editor, ns, "control", "2", 1)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	var lines []string
	show := func(when string) {
		for _, name := range []string{"victim", "control"} {
			cm := readConfigMap(t, ns, name)
			n, _ := round16Updates(cm.ManagedFields)
			lines = append(lines, fmt.Sprintf("%s: %s record %q marker %q, %d Update entries", when, name,
				cm.Annotations[fencingv1alpha1.ObjectEpochAnnotation], cm.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation], n))
		}
	}
	show("before coverage's first raise")
	if _, _, err := round16Fence(t, a, ns, 1); err != nil {
		t.Fatalf("replica-a's fence at epoch 1: %v", err)
	}
	show("after replica-a's fence at epoch 1")
	if _, _, err := round16Fence(t, b, ns, 2); err != nil {
		t.Fatalf("replica-b's fence at epoch 2: %v", err)
	}
	show("after replica-b's fence at epoch 2")
	// replica-a, stale (epoch 1), deletes with a plain client, naming what it read as the precondition.
	stale := round11Unthrottled(t, a.User)
	admitted := map[string]error{}
	for _, name := range []string{"victim", "control"} {
		cm := readConfigMap(t, ns, name)
		err := stale.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
		admitted[name] = err
		lines = append(lines, fmt.Sprintf("replica-a (stale, epoch 1) deletes %s with precondition %s: %s", name, cm.ResourceVersion, testenv.ErrString(err)))
	}
	for _, l := range lines {
		t.Log(l)
	}
	for name, err := range admitted {
		if err == nil {
			t.Errorf("a stale replica's DELETE of %s without the current token was admitted on a deletion marker planted before coverage (I4/I1)", name)
		}
	}
}

// TestRound16PlantedMarkerSurvivesTheHoldersFirstWrite: persona and route as
// TestRound16PlantedMarkerOnALeftObjectAuthorisesAStaleDelete, but the current holder (replica-b, epoch 2)
// first writes the left ConfigMap's data through fencing.NewClient (its first write, which "raises" a left
// object), as fence-on-acquire.md says closes the window; then replica-a, stale at epoch 1, deletes it with
// a plain client and the precondition it read. Invariant I4/I1: the stale replica's DELETE is refused.
// Observed (b725199): HELD (1 run). The holder's first write (fencing.NewClient) was admitted and removed the
// planted marker (record "2", marker "", 10 Update entries); the stale DELETE was refused. The window of
// TestRound16PlantedMarkerOnALeftObjectAuthorisesAStaleDelete lasts until the holder's first write to the
// object at the planted epoch.
func TestRound16PlantedMarkerSurvivesTheHoldersFirstWrite(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a := newWorker(t, ns, "app-operator")
	a.LeaseDuration = 10 * time.Minute
	a.Fences.Objects = true
	a.Holder = "replica-a"
	b := a
	b.Holder = "replica-b"
	grantObjects(t, ns, a.User, "editor")
	grantPolicies(t, ns, a.User)
	editor := env.ClientAs(t, "editor")
	round16Planted(t, editor, ns, "victim", "2", 9)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	time.Sleep(1100 * time.Millisecond)
	if _, _, err := round16Fence(t, a, ns, 1); err != nil {
		t.Fatalf("replica-a's fence at epoch 1: %v", err)
	}
	tok, _, err := round16Fence(t, b, ns, 2)
	if err != nil {
		t.Fatalf("replica-b's fence at epoch 2: %v", err)
	}
	hc := fencing.NewClient(round11Unthrottled(t, b.User), tokenOf(tok))
	werr := hc.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"}},
		client.RawPatch(types.MergePatchType, []byte(`{"data":{"holder":"b"}}`)))
	cm := readConfigMap(t, ns, "victim")
	n, _ := round16Updates(cm.ManagedFields)
	t.Logf("replica-b's first write at epoch 2: %s; victim now record %q marker %q, %d Update entries, rv %s", testenv.ErrString(werr),
		cm.Annotations[fencingv1alpha1.ObjectEpochAnnotation], cm.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation], n, cm.ResourceVersion)
	if werr != nil {
		t.Fatalf("the holder's first write: %v", werr)
	}
	stale := round11Unthrottled(t, a.User)
	derr := stale.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"}},
		client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
	t.Logf("replica-a (stale, epoch 1) deletes victim with precondition %s: %s", cm.ResourceVersion, testenv.ErrString(derr))
	if derr == nil {
		t.Errorf("after the holder's first write, a stale replica's DELETE of the victim without the current token was still admitted on the planted marker (I4/I1)")
	}
}
