package admission_test

// Round 24 of the independent attacker, against 2ce850f (a write without the token keeps the time of every
// entry of a token). Each test asserts the invariant it tries to break: it fails while the attack works.
// Worked / held, one line each (see each test's Observed); the attempt that worked stays open, a residual
// of liveness (docs/design/residuals.md, decision 0065), in open_holes_round24_test.go (build tag
// openholes):
//   - TestRound24ForgedTimesMergeTheArmingEntry: WORKED: an editor, before any hold, had the apiserver merge
//     the holder's entry into ancient-changes and dated its own ten Update entries (and the bucket) 2099;
//     the holder's genuine arming then had its own fresh entry merged into ancient-changes by the apiserver,
//     no entry of the token owned the hold (armedAt zero), and a kubelet's write 125 ms after the arming
//     passed held() and was admitted (control: held).
//   - TestRound24KubeletRenamesOrDuplicatesTheOwningEntry: HELD: 11.5 s after the arming, a kubelet's
//     duplicate of the owning entry dated 2099 (first: the apiserver keeps the last of an identifier, so
//     nothing changed; last: refused on the time), its apiVersion, subresource or operation changed (refused:
//     removes / gives ownership), an Apply twin (refused), the same instant with an offset or fractional
//     seconds (admitted, the apiserver normalises, time unchanged); the deployment controller not held after.
//   - TestRound24LegitimateWritesGoOn: HELD: fifteen free finalizer writes by distinct managers (merges into
//     ancient-changes, the holder writing in between), an update sending managedFields back as read, the
//     deployment controller's status and revision writes: all admitted.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round24Far is the forged time: far after anything the apiserver records.
var round24Far = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)

// round24Summary lists managedFields entries as manager/operation/subresource/apiVersion@time.
func round24Summary(fields []metav1.ManagedFieldsEntry) string {
	parts := make([]string, 0, len(fields))
	for _, e := range fields {
		at := "no time"
		if e.Time != nil {
			at = e.Time.UTC().Format(time.RFC3339)
		}
		parts = append(parts, fmt.Sprintf("%s/%s/%s/%s@%s", e.Manager, e.Operation, e.Subresource, e.APIVersion, at))
	}
	return strings.Join(parts, ", ")
}

func round24CM(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
}

// round24Finalizers is a merge patch setting the finalizers.
func round24Finalizers(fs []string) client.Patch {
	quoted := make([]string, len(fs))
	for i, f := range fs {
		quoted[i] = fmt.Sprintf("%q", f)
	}
	return client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"finalizers":[%s]}}`, strings.Join(quoted, ",")))
}

// round24Variant is one way of sending the owning entry back: it edits the managedFields list as read.
type round24Variant struct {
	name string
	edit func(fields []metav1.ManagedFieldsEntry, i int) []metav1.ManagedFieldsEntry
}

// TestRound24KubeletRenamesOrDuplicatesTheOwningEntry: persona: a kubelet (group system:nodes), 11.5 s after
// the holder armed its hold (no longer held). Route: change the owning entry's id (apiVersion, subresource,
// operation) so that it counts as removed and added, with its time moved to 2099; send a duplicate of it dated
// 2099 before or after it (entries() keeps the last of an id, armedAt reads every entry); send its time as
// the same instant with an offset or fractional seconds. Invariant: the latest time of an entry of the token
// that owns the hold is still the arming's, and the deployment controller is not held afterwards.
// Observed (2ce850f, 1 run): HELD. Armed Update//v1 06:31:32Z. Duplicate dated 2099 first: admitted, the
// apiserver kept the last entry of the identifier (still 06:31:32Z); duplicate last: refused ("changes the
// time the apiserver recorded from 06:31:32Z to 2099"); apiVersion v1beta1 and subresource status: refused
// ("removes the entry that owns metadata.annotations[fencing.fencekit.io/epoch]"); operation Apply and an
// Apply twin: refused ("gives ownership of ... (Apply)"); offset 07:31:32+01:00 and 06:31:32.999Z: admitted,
// stored time unchanged. The deployment controller's free write 11.59 s after the arming: admitted.
func TestRound24KubeletRenamesOrDuplicatesTheOwningEntry(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "system:node:n1"
	const dc = "system:serviceaccount:kube-system:deployment-controller"
	holder, tok := configMapHolder(t, ns, node, dc)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	kubelet := env.ClientAs(t, node, "system:nodes")
	controller := env.ClientAs(t, dc)
	manager := protocol.FieldManagerFor(tok.Epoch)
	const name = "renamed"
	round23Cleanup(t, ns, name)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "holder's"}}
	if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fenced.Create(ctx, cm) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if err := holder.Client.Patch(ctx, round24CM(ns, name), round23HoldPatch(tok.Epoch), testenv.Presenting(tok.Epoch)); err != nil {
		t.Fatal(err)
	}
	armed := time.Now()
	owning, armedAt := round23Owning(readConfigMap(t, ns, name).ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
	t.Logf("armed: %s", owning)
	far := &metav1.Time{Time: round24Far}
	variants := []round24Variant{
		{"duplicate dated 2099 first", func(f []metav1.ManagedFieldsEntry, i int) []metav1.ManagedFieldsEntry {
			d := *f[i].DeepCopy()
			d.Time = far
			return append([]metav1.ManagedFieldsEntry{d}, f...)
		}},
		{"duplicate dated 2099 last", func(f []metav1.ManagedFieldsEntry, i int) []metav1.ManagedFieldsEntry {
			d := *f[i].DeepCopy()
			d.Time = far
			return append(f, d)
		}},
		{"apiVersion v1 to v1beta1, dated 2099", func(f []metav1.ManagedFieldsEntry, i int) []metav1.ManagedFieldsEntry {
			f[i].APIVersion, f[i].Time = "v1beta1", far
			return f
		}},
		{"subresource status, dated 2099", func(f []metav1.ManagedFieldsEntry, i int) []metav1.ManagedFieldsEntry {
			f[i].Subresource, f[i].Time = "status", far
			return f
		}},
		{"operation Apply, dated 2099", func(f []metav1.ManagedFieldsEntry, i int) []metav1.ManagedFieldsEntry {
			f[i].Operation, f[i].Time = metav1.ManagedFieldsOperationApply, far
			return f
		}},
		{"an Apply twin dated 2099 added", func(f []metav1.ManagedFieldsEntry, i int) []metav1.ManagedFieldsEntry {
			d := *f[i].DeepCopy()
			d.Operation, d.Time = metav1.ManagedFieldsOperationApply, far
			return append(f, d)
		}},
	}
	time.Sleep(time.Until(armed.Add(admission.MaxClusterControllerHold + 1500*time.Millisecond)))
	for n, v := range variants {
		got := readConfigMap(t, ns, name)
		i := -1
		for j, e := range got.ManagedFields {
			if e.Manager == manager {
				i = j
			}
		}
		if i < 0 {
			t.Fatalf("no entry of %s: %s", manager, round24Summary(got.ManagedFields))
		}
		got.ManagedFields = v.edit(got.ManagedFields, i)
		got.Finalizers = append(got.Finalizers, fmt.Sprintf("example.com/node-%d", n))
		err := kubelet.Update(ctx, got, client.FieldOwner("kubelet"))
		after := readConfigMap(t, ns, name).ManagedFields
		owning, at := round23Owning(after, manager, fencingv1alpha1.HoldAtEpochAnnotation)
		t.Logf("%s: the kubelet's write: %s; owning now: %s; entries: %s", v.name, round9Short(err), owning, round24Summary(after))
		if at.After(armedAt) {
			t.Errorf("%s: the latest entry of %s owning the hold is now dated %s, after the arming (%s)", v.name, manager, at.UTC().Format(time.RFC3339), armedAt.UTC().Format(time.RFC3339))
		}
	}
	for _, form := range []string{"offset", "fraction"} {
		got := readConfigMap(t, ns, name)
		i := -1
		for j, e := range got.ManagedFields {
			if e.Manager == manager && e.Time != nil {
				i = j
			}
		}
		if i < 0 {
			t.Logf("%s: no dated entry of %s left", form, manager)
			continue
		}
		at := got.ManagedFields[i].Time.UTC()
		value := at.In(time.FixedZone("", 3600)).Format(time.RFC3339)
		if form == "fraction" {
			value = at.Format("2006-01-02T15:04:05") + ".999Z"
		}
		ops := fmt.Appendf(nil, `[{"op":"replace","path":"/metadata/managedFields/%d/time","value":%q},{"op":"add","path":"/metadata/finalizers/-","value":"example.com/%s"}]`, i, value, form)
		err := kubelet.Patch(ctx, round24CM(ns, name), client.RawPatch(types.JSONPatchType, ops), client.FieldOwner("kubelet"))
		owning, _ := round23Owning(readConfigMap(t, ns, name).ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
		t.Logf("time sent as %s (%s): %s; owning now: %s", form, value, round9Short(err), owning)
	}
	err := round23Probe(t, controller, ns, name, "example.com/dc")
	t.Logf("the deployment controller's free write %v after the arming: %s", time.Since(armed).Round(time.Millisecond), round9Short(err))
	if err != nil {
		t.Errorf("%v after the arming the deployment controller is still held: %v", time.Since(armed).Round(time.Second), err)
	}
}

// TestRound24LegitimateWritesGoOn: personas: an editor, the deployment controller, a user's kubectl edit.
// Route: writes without the token that 2ce850f must not refuse: fifteen free finalizer writes by distinct
// field managers on a holder-written ConfigMap (the apiserver merges the holder's Update entry into
// ancient-changes past ten); an update that sends the managedFields back as read (kubectl edit --
// output-patch aside, client-go Update from a fresh read); the holder writing again in between; the
// deployment controller's status write and its revision annotation through deployments/status on a
// holder-written Deployment. Invariant: each is admitted.
// Observed (2ce850f, 1 run): HELD. All fifteen finalizer writes admitted (the holder's entry ended merged
// into ancient-changes, ten Update entries left); the holder's second write and the update with managedFields
// as read admitted; the deployment controller's status patch and its revision annotation through
// deployments/status (update) admitted.
func TestRound24LegitimateWritesGoOn(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const dc = "system:serviceaccount:kube-system:deployment-controller"
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor", dc)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	controller := env.ClientAs(t, dc)
	const name = "legit"
	round23Cleanup(t, ns, name)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "holder's"}}
	if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fenced.Create(ctx, cm) }); err != nil {
		t.Fatal(err)
	}
	var fs []string
	for i := range 15 {
		if i == 7 {
			// The holder writes again: its entry is dated anew, between the editors'.
			if err := holder.Client.Patch(ctx, round24CM(ns, name), client.RawPatch(types.MergePatchType, []byte(`{"data":{"k2":"holder's again"}}`)), testenv.Presenting(tok.Epoch)); err != nil {
				t.Errorf("the holder's second write: %v", err)
			}
		}
		time.Sleep(300 * time.Millisecond)
		fs = append(fs, fmt.Sprintf("example.com/l%d", i))
		err := retryRBAC(t, "the editor's finalizer", func() error {
			return editor.Patch(ctx, round24CM(ns, name), round24Finalizers(fs), client.FieldOwner(fmt.Sprintf("writer-%d", i)))
		})
		if err != nil {
			t.Errorf("free finalizer write %d (manager writer-%d): %s; entries before: %s", i, i, round9Short(err), round24Summary(readConfigMap(t, ns, name).ManagedFields))
			fs = fs[:len(fs)-1]
		}
	}
	t.Logf("after the free writes: %s", round24Summary(readConfigMap(t, ns, name).ManagedFields))
	got := readConfigMap(t, ns, name)
	got.Finalizers = append(got.Finalizers, "example.com/edit")
	if err := editor.Update(ctx, got, client.FieldOwner("kubectl-edit")); err != nil {
		t.Errorf("an update sending managedFields back as read: %s", round9Short(err))
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	if err := retryRBAC(t, "the holder's Deployment", func() error { return fenced.Create(ctx, dep) }); err != nil {
		t.Fatal(err)
	}
	key := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	err := retryRBAC(t, "the controller's status", func() error {
		return controller.SubResource("status").Patch(ctx, key, client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":1}}`)), client.FieldOwner("kube-controller-manager"))
	})
	t.Logf("the deployment controller's status write: %s", round9Short(err))
	if err != nil {
		t.Errorf("the deployment controller's status write: %v", err)
	}
	d := testenv.Read[appsv1.Deployment](t, env.Client, ns, "app")
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations["deployment.kubernetes.io/revision"] = "1"
	err = controller.SubResource("status").Update(ctx, d, client.FieldOwner("kube-controller-manager"))
	t.Logf("the deployment controller's revision through deployments/status (update): %s; entries: %s", round9Short(err),
		round24Summary(testenv.Read[appsv1.Deployment](t, env.Client, ns, "app").ManagedFields))
	if err != nil {
		t.Errorf("the deployment controller's revision: %v", err)
	}
}
