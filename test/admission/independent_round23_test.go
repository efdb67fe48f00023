package admission_test

// Round 23 of the independent attacker, against 798d305 (armedAt: a mark is armed at the latest time of
// an entry of its epoch's token that owns the mark's annotation). Each test asserts the invariant it tries
// to break: it fails while the attack works. Worked / held, one line each (see each test's Observed); the
// two redating attacks are closed by decision 0064 (a write without the token keeps the time of every
// entry of a token), and the planted hold stays open (open_holes_round23_test.go, build tag openholes):
//   - TestRound23ControllerRedatesTheOwningEntry: WORKED: a kubelet, no longer held 11.5 s after the
//     arming, redated the token's entry that owns the hold to 2099 with a free finalizer write; the
//     deployment controller was then still refused 11.5 s after the arming (control admitted).
//   - TestRound23EditorRedatesWhileTheLeaseLapsed: WORKED: while the holder's 3 s lease lapsed, an editor
//     redated the owning entry to 2099; after the holder's late renewal at the same epoch a kubelet was
//     still refused 11.5 s after the arming (control admitted).
//   - TestRound23EveryArmingOwnsTheMark: HELD: merge patch, JSON patch, update and server-side apply on a
//     ConfigMap, a merge patch on a Deployment, pkg/fencing's epochPatch hold and Writer.Delete's marker on
//     FencedResources each left an entry of the token owning the mark, dated by the arming; controllers held.
//   - TestRound23PlantedHoldAtTheHoldersEpoch: WORKED: a hold planted before coverage at the epoch the
//     holder then got is owned by no entry of the token, never holds the controllers, and pkg/fencing arms
//     none (isHeld): a kubelet's write between the holder's read and update made it conflict 3 rounds out of
//     3, and the holder's own arming with the same value left no owning entry (kubelet admitted 115 ms after).

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round23Owning returns the managedFields entries of manager on obj that own annotation key: operation,
// subresource, apiVersion and time, and the latest such time.
func round23Owning(fields []metav1.ManagedFieldsEntry, manager, key string) (string, time.Time) {
	var parts []string
	var latest time.Time
	for _, e := range fields {
		if e.Manager != manager || e.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &set); err != nil {
			continue
		}
		meta, _ := set["f:metadata"].(map[string]any)
		ann, _ := meta["f:annotations"].(map[string]any)
		if _, ok := ann["f:"+key]; !ok {
			continue
		}
		at := "no time"
		if e.Time != nil {
			at = e.Time.UTC().Format(time.RFC3339)
			if e.Time.After(latest) {
				latest = e.Time.Time
			}
		}
		parts = append(parts, fmt.Sprintf("%s/%s/%s %s", e.Operation, e.Subresource, e.APIVersion, at))
	}
	if len(parts) == 0 {
		return "no entry of " + manager + " owns " + key, latest
	}
	return strings.Join(parts, ", "), latest
}

// round23Redate sets the time of every entry of manager in fields to at.
func round23Redate(fields []metav1.ManagedFieldsEntry, manager string, at time.Time) {
	for i := range fields {
		if fields[i].Manager == manager {
			fields[i].Time = &metav1.Time{Time: at}
		}
	}
}

// round23HoldPatch is pkg/fencing's hold on an object (client.go hold): a merge patch of the hold and the
// epoch record.
func round23HoldPatch(epoch int64) client.Patch {
	return client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d",%q:"%d"}}}`,
		fencingv1alpha1.HoldAtEpochAnnotation, epoch, fencingv1alpha1.ObjectEpochAnnotation, epoch))
}

// round23Probe is a cluster controller's (or anyone's) free write, dry run: a finalizer.
func round23Probe(t *testing.T, c client.Client, ns, name, finalizer string) error {
	return c.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"finalizers":[%q]}}`, finalizer)), client.DryRunAll, client.FieldOwner("probe"))
}

func round23Cleanup(t *testing.T, ns string, names ...string) {
	t.Cleanup(func() {
		for _, name := range names {
			_ = env.Client.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
}

// TestRound23ControllerRedatesTheOwningEntry: persona: a cluster controller (a compromised kubelet, group
// system:nodes), which the hold stops holding 10 s after the arming; victims: the other cluster
// controllers (kube-controller-manager's deployment-controller). Route: once the hold no longer holds the
// kubelet, its free write (a finalizer) sends the managedFields back with the time of the token's entry
// that OWNS the hold moved to 2099; ownershipChanges compares what entries own, never their time, and the
// apiserver keeps the times a write sends for entries other than the writer's. armedAt then reads 2099.
// Invariant: a hold holds the cluster's controllers at most ~MaxClusterControllerHold after the holder's
// arming write; nobody without the token extends it, a controller itself included.
// Observed (798d305, 1 run): WORKED. Both ConfigMaps armed (Update//v1 06:17:24Z); the deployment
// controller's free write refused 13 ms after. At 11.5 s the kubelet's update (finalizer, the owning
// Update//v1 entry of fencing.fencekit.io/epoch=1 at 2099-01-01T00:00:00Z) was admitted and the time kept;
// then the deployment controller's free write was refused on "redated" ("is held for the holder's next
// compare-and-swap write ... hold-at-epoch=1 is the Lease's current epoch") 11.52 s after the arming,
// admitted on "control". Wrong: request.go armedAt trusts the owning entry's time, and free.go
// ownershipChanges lets a write without the token change a holder's entry's time (it compares what
// entries own only).
func TestRound23ControllerRedatesTheOwningEntry(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "system:node:n1"
	const dc = "system:serviceaccount:kube-system:deployment-controller"
	holder, tok := configMapHolder(t, ns, "editor", node, dc)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	kubelet := env.ClientAs(t, node, "system:nodes")
	controller := env.ClientAs(t, dc)
	manager := protocol.FieldManagerFor(tok.Epoch)
	names := []string{"redated", "control"}
	round23Cleanup(t, ns, names...)
	for _, name := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "holder's"}}
		if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatalf("the holder creates %s: %v", name, err)
		}
	}
	time.Sleep(1100 * time.Millisecond)
	armed := map[string]time.Time{}
	for _, name := range names {
		if err := holder.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			round23HoldPatch(tok.Epoch), testenv.Presenting(tok.Epoch)); err != nil {
			t.Fatalf("the holder arms its hold on %s: %v", name, err)
		}
		armed[name] = time.Now()
		owning, _ := round23Owning(readConfigMap(t, ns, name).ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
		t.Logf("%s armed: %s", name, owning)
	}
	for _, name := range names {
		err := retryRBAC(t, "the controller's write", func() error { return round23Probe(t, controller, ns, name, "example.com/dc") })
		t.Logf("%s: the deployment controller's free write %v after the hold: %s", name, time.Since(armed[name]).Round(time.Millisecond), round9Short(err))
		if !fencing.IsTokenMissing(err) {
			t.Errorf("control: %s: the controller's free write within the hold: %v, want it held", name, err)
		}
	}
	time.Sleep(time.Until(armed[names[len(names)-1]].Add(admission.MaxClusterControllerHold + 1500*time.Millisecond)))
	// The kubelet, no longer held, redates the owning entry (and adds a free finalizer so that the write is one).
	got := readConfigMap(t, ns, "redated")
	round23Redate(got.ManagedFields, manager, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	got.Finalizers = append(got.Finalizers, "example.com/node")
	err := retryRBAC(t, "the kubelet's redating write", func() error { return kubelet.Update(ctx, got, client.FieldOwner("kubelet")) })
	t.Logf("the kubelet's write redating the owning entry %v after the hold: %s", time.Since(armed["redated"]).Round(time.Millisecond), round9Short(err))
	owning, _ := round23Owning(readConfigMap(t, ns, "redated").ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
	t.Logf("redated after the kubelet's write: %s", owning)
	for _, name := range names {
		err := round23Probe(t, controller, ns, name, "example.com/dc")
		t.Logf("%s: the deployment controller's free write %v after the hold: %s", name, time.Since(armed[name]).Round(time.Millisecond), round9Short(err))
		if err != nil {
			t.Errorf("%s: %v after the holder armed its hold, the deployment controller's free write is still refused: %v (a hold holds the cluster's controllers for %v at most)",
				name, time.Since(armed[name]).Round(time.Second), err, admission.MaxClusterControllerHold)
		}
	}
}

// round23Renew renews the Lease tok names as the holder, at tok's epoch, with duration d: the late renewal
// of a holder that paused past its lease (same holder, same epoch).
func round23Renew(t *testing.T, w worker, tok elector.Token, d time.Duration) error {
	var l coordinationv1.Lease
	if err := w.Client.Get(t.Context(), tok.Lease, &l); err != nil {
		return err
	}
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	l.Spec.LeaseDurationSeconds = ptr.To(int32(d / time.Second))
	return w.Client.Update(t.Context(), &l, testenv.Presenting(tok.Epoch))
}

// TestRound23EditorRedatesWhileTheLeaseLapsed: persona: a namespace editor (RBAC on ConfigMaps, no
// token). Route: a mark holds only while the Lease is live at its epoch (decide.go: !l.Live(now) skips
// it); while the holder's lease has lapsed (a paused holder), the editor's free write redates the token's
// entry that owns the hold to 2099. The holder then renews at the same epoch (late renewal), and the hold
// it armed long ago holds again, with the forged time. Invariant: a hold holds the cluster's controllers
// at most ~MaxClusterControllerHold after the holder's arming write.
// Observed (798d305, 1 run): WORKED. The editor was refused while the Lease was live; its redating update
// (owning Update//v1 entry to 2099, a free finalizer) was admitted 3.05 s after the arming, once the 3 s
// lease lapsed, and the time kept. The holder's late renewal at epoch 1 was admitted; the kubelet's free
// write was then refused on "redated" 11.5 s after the arming, admitted on "control". Same wrong lines as
// TestRound23ControllerRedatesTheOwningEntry.
func TestRound23EditorRedatesWhileTheLeaseLapsed(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "system:node:n1"
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 3 * time.Second
	grantObjects(t, ns, holder.User, "editor", node)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	kubelet := env.ClientAs(t, node, "system:nodes")
	manager := protocol.FieldManagerFor(tok.Epoch)
	names := []string{"redated", "control"}
	round23Cleanup(t, ns, names...)
	for _, name := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "holder's"}}
		if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatalf("the holder creates %s: %v", name, err)
		}
		if err := holder.Client.Patch(ctx, cm, round23HoldPatch(tok.Epoch), testenv.Presenting(tok.Epoch)); err != nil {
			t.Fatalf("the holder arms its hold on %s: %v", name, err)
		}
	}
	armed := time.Now()
	err := retryRBAC(t, "the editor's write", func() error { return round23Probe(t, editor, ns, "redated", "example.com/editor") })
	t.Logf("the editor's free write while the Lease is live: %s", round9Short(err))
	var redate error
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		got := readConfigMap(t, ns, "redated")
		round23Redate(got.ManagedFields, manager, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
		got.Finalizers = append(got.Finalizers, "example.com/editor")
		if redate = editor.Update(ctx, got, client.FieldOwner("editor")); redate == nil {
			break
		}
	}
	t.Logf("the editor's redating write %v after the hold, once the lease lapsed: %s", time.Since(armed).Round(time.Millisecond), round9Short(redate))
	owning, _ := round23Owning(readConfigMap(t, ns, "redated").ManagedFields, manager, fencingv1alpha1.HoldAtEpochAnnotation)
	t.Logf("redated: %s", owning)
	if redate != nil {
		t.Logf("the editor could not redate while the lease lapsed: the attack stops here")
		return
	}
	time.Sleep(time.Until(armed.Add(admission.MaxClusterControllerHold + 1500*time.Millisecond)))
	if err := round23Renew(t, holder, tok, 30*time.Second); err != nil {
		t.Logf("the holder's late renewal at epoch %d: %s: the attack stops here", tok.Epoch, round9Short(err))
		return
	}
	t.Logf("the holder renewed late at epoch %d", tok.Epoch)
	var last error
	for range 10 { // the webhook's copy of the Lease follows its watch
		for _, name := range names {
			last = round23Probe(t, kubelet, ns, name, "example.com/node")
			t.Logf("%s: the kubelet's free write %v after the hold, the Lease renewed: %s", name, time.Since(armed).Round(time.Millisecond), round9Short(last))
			if name == "redated" && last != nil {
				t.Errorf("%s: %v after the holder armed its hold, the kubelet's free write is still refused: %v (a hold holds the cluster's controllers for %v at most)",
					name, time.Since(armed).Round(time.Second), last, admission.MaxClusterControllerHold)
			}
		}
		if last != nil || t.Failed() {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestRound23EveryArmingOwnsTheMark: persona: the holder. Route: armedAt counts only an entry of the
// token that owns the mark; an arming that leaves none would hold the cluster's controllers not at all
// (armed zero), and their storm would starve the holder's retry. The holder arms a hold on a ConfigMap by
// merge patch (pkg/fencing's hold), JSON patch, update and server-side apply, on a Deployment by merge
// patch, on a FencedResource by pkg/fencing's epochPatch, and a FencedResource's deletion marker as
// Writer.Delete writes it. Invariant: every genuine arming leaves an entry of the token that owns the mark,
// dated by the arming, and a controller's write right after it is held.
// Observed (798d305, 1 run): HELD. Owning entries: merge, json, update Update//v1, apply Apply//v1,
// Deployment Update//apps/v1, FencedResource hold and marker Update//fencing.fencekit.io/v1alpha1, each
// dated the arming second; the kubelet's (and the deployment controller's status) write 10-125 ms after
// the arming refused (FencingTokenMissing, "held for the holder's next compare-and-swap write").
func TestRound23EveryArmingOwnsTheMark(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "system:node:n1"
	const dc = "system:serviceaccount:kube-system:deployment-controller"
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, node, dc)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"})
	fr := declare(t, ns, "fr", appLease)
	frDel := declare(t, ns, "fr-del", appLease)
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	kubelet := env.ClientAs(t, node, "system:nodes")
	controller := env.ClientAs(t, dc)
	manager := protocol.FieldManagerFor(tok.Epoch)
	hold := fencingv1alpha1.HoldAtEpochAnnotation
	names := []string{"merge", "json", "update", "apply"}
	round23Cleanup(t, ns, names...)
	for _, name := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "holder's"}}
		if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatalf("the holder creates %s: %v", name, err)
		}
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	if err := retryRBAC(t, "the holder's Deployment", func() error { return fenced.Create(ctx, dep) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	check := func(what string, fields []metav1.ManagedFieldsEntry, key string, before time.Time) {
		owning, at := round23Owning(fields, manager, key)
		t.Logf("%s: %s", what, owning)
		if at.IsZero() || at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
			t.Errorf("%s: the holder's arming left no entry of %s owning %s dated by it (%s; armed at %s)", what, manager, key, owning, before.UTC().Format(time.RFC3339))
		}
	}
	cmKey := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	}
	epoch := fmt.Sprint(tok.Epoch)
	arm := map[string]func() error{
		"merge": func() error {
			return holder.Client.Patch(ctx, cmKey("merge"), round23HoldPatch(tok.Epoch), testenv.Presenting(tok.Epoch))
		},
		"json": func() error {
			ops := fmt.Appendf(nil, `[{"op":"add","path":"/metadata/annotations/%s","value":%q}]`, strings.ReplaceAll(hold, "/", "~1"), epoch)
			return holder.Client.Patch(ctx, cmKey("json"), client.RawPatch(types.JSONPatchType, ops), testenv.Presenting(tok.Epoch))
		},
		"update": func() error {
			got := readConfigMap(t, ns, "update")
			got.Annotations[hold] = epoch
			return holder.Client.Update(ctx, got, testenv.Presenting(tok.Epoch))
		},
		"apply": func() error {
			apply := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"apply","namespace":%q,"annotations":{%q:%q,%q:%q}},"data":{"k":"holder's"}}`,
				ns, hold, epoch, fencingv1alpha1.ObjectEpochAnnotation, epoch)
			return holder.Client.Patch(ctx, cmKey("apply"), client.RawPatch(types.ApplyPatchType, apply), testenv.Presenting(tok.Epoch), client.ForceOwnership)
		},
	}
	for _, name := range names {
		before := time.Now()
		if err := arm[name](); err != nil {
			t.Errorf("the holder arms its hold on %s: %v", name, err)
			continue
		}
		check("ConfigMap "+name, readConfigMap(t, ns, name).ManagedFields, hold, before)
		err := round23Probe(t, kubelet, ns, name, "example.com/node")
		t.Logf("ConfigMap %s: the kubelet's free write %v after the arming: %s", name, time.Since(before).Round(time.Millisecond), round9Short(err))
		if !fencing.IsTokenMissing(err) {
			t.Errorf("ConfigMap %s: the kubelet's free write right after the arming: %v, want it held", name, err)
		}
	}
	before := time.Now()
	if err := holder.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}, round23HoldPatch(tok.Epoch), testenv.Presenting(tok.Epoch)); err != nil {
		t.Errorf("the holder arms its hold on the Deployment: %v", err)
	} else {
		d := testenv.Read[appsv1.Deployment](t, env.Client, ns, "app")
		check("Deployment", d.ManagedFields, hold, before)
		err := controller.SubResource("status").Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":7}}`)), client.FieldOwner("deployment-controller"), client.DryRunAll)
		t.Logf("Deployment: the controller's status write right after the arming: %s", round9Short(err))
		if !fencing.IsTokenMissing(err) {
			t.Errorf("Deployment: the controller's status write right after the arming: %v, want it held", err)
		}
	}
	frPatch := func(key types.NamespacedName, ann map[string]any) error {
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": map[string]any{"epoch": tok.Epoch}})
		if err != nil {
			return err
		}
		return holder.Client.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
			client.RawPatch(types.MergePatchType, raw), testenv.Presenting(tok.Epoch))
	}
	before = time.Now()
	if err := frPatch(fr, map[string]any{fencingv1alpha1.WriterAnnotation: tok.Holder, fencingv1alpha1.DeleteAtEpochAnnotation: nil, hold: epoch}); err != nil {
		t.Errorf("the holder arms its hold on FencedResource %s: %v", fr, err)
	} else {
		check("FencedResource hold", get(t, fr).ManagedFields, hold, before)
	}
	before = time.Now()
	if err := frPatch(frDel, map[string]any{fencingv1alpha1.WriterAnnotation: tok.Holder, fencingv1alpha1.DeleteAtEpochAnnotation: epoch}); err != nil {
		t.Errorf("the holder writes its deletion marker on FencedResource %s: %v", frDel, err)
	} else {
		check("FencedResource deletion marker", get(t, frDel).ManagedFields, fencingv1alpha1.DeleteAtEpochAnnotation, before)
	}
}
