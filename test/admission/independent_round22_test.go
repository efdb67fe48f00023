package admission_test

// Round 22 of the independent attacker, against bf69dc2/5e90c28 (Request.Complete reads the token, the
// record, the marker and hold with the time their holder armed them, and who wrote, once as the webhook
// decodes the request; Decide compares those facts). No behaviour changed by that refactor was found:
// every fact Complete reads depends only on Class, FieldManager, Old and New, which the webhooks do not
// change after decodeRequest, and each is the expression the rule computed before. Each test asserts the
// invariant it tries to break. Worked / held, one line each (see each test's Observed):
//   - TestRound22ForgedEntryTimeKeepsControllersHeld: WORKED before decision 0063 (it predates bf69dc2): a
//     write without the token moved the time of another entry of the token (its Apply entry) to 2099, and
//     a hold the holder armed later held the cluster's controllers past MaxClusterControllerHold (still
//     refused 12 s after the arming). Closed: the arming time is read only from an entry of the token
//     that owns the mark (armedAt).
//   - TestRound22HoldOnTheStatusRouteOfAController: HELD (a controller's status write is held for its 10 s
//     and admitted after).

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
)

// round22Entries describes the managedFields entries of manager on cm: operation and time.
func round22Entries(cm *corev1.ConfigMap, manager string) string {
	var parts []string
	for _, e := range cm.ManagedFields {
		if e.Manager != manager {
			continue
		}
		at := "no time"
		if e.Time != nil {
			at = e.Time.UTC().Format(time.RFC3339)
		}
		parts = append(parts, fmt.Sprintf("%s/%s %s", e.Operation, e.Subresource, at))
	}
	return strings.Join(parts, ", ")
}

// TestRound22ForgedEntryTimeKeepsControllersHeld: persona: a namespace editor (RBAC on ConfigMaps, no
// token), then the cluster's controllers as the victims. Route: Complete's armedAt takes, as the time the
// holder armed its hold, the latest time of ANY managedFields entry of the token's field manager; the
// free-write rule (ownershipChanges) compares what entries own, never their time. The holder writes its
// ConfigMap with its token twice, by update (an Update entry) and by server-side apply (an Apply entry,
// same manager). While no hold stands, the editor sends the managedFields back with the Apply entry's time
// moved to 2099 (nothing owned changes). The holder then arms a hold (its Update entry's time becomes
// now). Invariant (decision behind MaxClusterControllerHold): a hold holds the cluster's controllers for
// at most 10 s after the holder armed it; a forged time must not extend it (I2 for the controllers: a
// holder that armed a hold and crashed must not lock them out for the rest of its term). Control: the
// same ConfigMap without the forged time; and "single", where the editor forges the time of the token's
// only entry (the Update entry the holder's arming write then changes).
// Observed (5e90c28, 5 runs): a first without the free finalizer HELD (the apiserver kept the stored time:
// a write that changes only managedFields timestamps is a no-op to it); four with it WORKED. The editor's
// update (managedFields with the Apply entry of fencing.fencekit.io/epoch=1 at 2099-01-01T00:00:00Z, plus
// a free finalizer) was admitted and the time kept.
// The holder's arming write set its Update entry to now, the Apply entry stayed at 2099; armedAt takes the
// latest. The kubelet's free write (system:node:n1, group system:nodes) was held 20 ms after the arming on
// all three (control), and 12 s after: still refused on "forged" ("is held for the holder's next
// compare-and-swap write ... hold-at-epoch=1 is the Lease's current epoch"), admitted on "single" and
// "control". The hold keeps the controllers out until the holder next writes the object or the Lease ends.
// Wrong: internal/operator/admission/request.go armedAt (the latest time of any entry of the token's
// field manager, a time in the future included), with free.go ownershipChanges, which lets a write without
// the token change a token entry's time.
func TestRound22ForgedEntryTimeKeepsControllersHeld(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "system:node:n1"
	holder, tok := configMapHolder(t, ns, "editor", node)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	kubelet := env.ClientAs(t, node, "system:nodes")
	manager := protocol.FieldManagerFor(tok.Epoch)
	names := []string{"forged", "single", "control"}
	t.Cleanup(func() {
		for _, name := range names {
			_ = env.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	})
	future := metav1.NewTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, name := range names {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "holder's"}}
		if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatalf("the holder creates %s: %v", name, err)
		}
		if name == "single" { // one entry of the token: the holder's Update entry, forged below
			got := readConfigMap(t, ns, name)
			for i, e := range got.ManagedFields {
				if e.Manager == manager {
					got.ManagedFields[i].Time = &future
				}
			}
			got.Finalizers = append(got.Finalizers, "example.com/editor")
			err := retryRBAC(t, "the editor's forged time", func() error { return editor.Update(ctx, got, client.FieldOwner("editor")) })
			t.Logf("the editor moves the only entry of %s to %s on %s: %s", manager, future.UTC().Format(time.RFC3339), name, round9Short(err))
			continue
		}
		apply := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q},"data":{"applied":"x"}}`, name, ns)
		if err := holder.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.ApplyPatchType, apply), client.FieldOwner(manager), client.ForceOwnership); err != nil {
			t.Fatalf("the holder's apply to %s: %v", name, err)
		}
		if name != "forged" {
			continue
		}
		got := readConfigMap(t, ns, name)
		for i, e := range got.ManagedFields {
			if e.Manager == manager && e.Operation == metav1.ManagedFieldsOperationApply {
				got.ManagedFields[i].Time = &future
			}
		}
		// With nothing else changed, the apiserver keeps the stored times (a write that changes only
		// managedFields timestamps is a no-op); a free finalizer makes it a write.
		got.Finalizers = append(got.Finalizers, "example.com/editor")
		err := retryRBAC(t, "the editor's forged time", func() error { return editor.Update(ctx, got, client.FieldOwner("editor")) })
		t.Logf("the editor moves the Apply entry of %s to %s on %s: %s", manager, future.UTC().Format(time.RFC3339), name, round9Short(err))
	}
	for _, name := range names {
		t.Logf("%s before the hold: %s", name, round22Entries(readConfigMap(t, ns, name), manager))
	}
	time.Sleep(1100 * time.Millisecond)
	armed := map[string]time.Time{}
	for _, name := range names {
		hold := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"}}}`, fencingv1alpha1.HoldAtEpochAnnotation, tok.Epoch)
		if err := fenced.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, hold)); err != nil {
			t.Fatalf("the holder arms its hold on %s: %v", name, err)
		}
		armed[name] = time.Now()
		t.Logf("%s after the hold: %s", name, round22Entries(readConfigMap(t, ns, name), manager))
	}
	probe := func(c client.Client, name string) error {
		return c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/node"]}}`)), client.DryRunAll, client.FieldOwner("kubelet"))
	}
	for _, name := range names {
		err := retryRBAC(t, "the kubelet's write", func() error { return probe(kubelet, name) })
		t.Logf("%s: the kubelet's free write %v after the hold: %s", name, time.Since(armed[name]).Round(time.Millisecond), round9Short(err))
		if !fencing.IsTokenMissing(err) {
			t.Errorf("%s: within %v of the hold, the kubelet's free write: %v, want it held (FencingTokenMissing)", name, admission.MaxClusterControllerHold, err)
		}
	}
	time.Sleep(time.Until(armed[names[len(names)-1]].Add(admission.MaxClusterControllerHold + 2*time.Second)))
	for _, name := range names {
		err := probe(kubelet, name)
		t.Logf("%s: the kubelet's free write %v after the hold: %s", name, time.Since(armed[name]).Round(time.Millisecond), round9Short(err))
		if err != nil {
			t.Errorf("%s: %v after the holder armed its hold, the kubelet's free write is still refused: %v (a hold holds the cluster's controllers for %v at most)",
				name, time.Since(armed[name]).Round(time.Second), err, admission.MaxClusterControllerHold)
		}
		err = probe(editor, name)
		t.Logf("%s: the editor's free write: %s", name, round9Short(err))
	}
}

// TestRound22HoldOnTheStatusRouteOfAController: persona: the Deployment controller (a cluster controller
// whose status writes are free). Route: Complete reads the marks off the stored object as decodeRequest
// got it, before the object webhook sets the route's Subresource; on a status write the stored object is
// the Deployment itself. Invariant: while the holder's hold at the current epoch is fresh (under
// MaxClusterControllerHold), the controller's status write waits (FencingTokenMissing), and once it is
// older it goes through.
// Observed (5e90c28, 3 runs): HELD. Status write before the hold admitted; 6 ms after the hold refused
// ("Deployment .../app is held for the holder's next compare-and-swap write ... hold-at-epoch=1"); 12 s
// after, admitted.
func TestRound22HoldOnTheStatusRouteOfAController(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const dc = "system:serviceaccount:kube-system:deployment-controller"
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, dc)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	controller := env.ClientAs(t, dc)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	if err := retryRBAC(t, "the holder's Deployment", func() error { return fenced.Create(ctx, dep) }); err != nil {
		t.Fatal(err)
	}
	status := func(n int) error {
		return controller.SubResource("status").Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"observedGeneration":%d}}`, n)), client.FieldOwner("deployment-controller"))
	}
	err := retryRBAC(t, "the controller's status", func() error { return status(1) })
	t.Logf("the controller's status write before the hold: %s", round9Short(err))
	if err != nil {
		t.Fatalf("control: the controller's status write without a hold: %v", err)
	}
	hold := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"}}}`, fencingv1alpha1.HoldAtEpochAnnotation, tok.Epoch)
	if err := fenced.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}, client.RawPatch(types.MergePatchType, hold)); err != nil {
		t.Fatalf("the holder arms its hold: %v", err)
	}
	armed := time.Now()
	err = status(2)
	t.Logf("the controller's status write %v after the hold: %s", time.Since(armed).Round(time.Millisecond), round9Short(err))
	if !fencing.IsTokenMissing(err) {
		t.Errorf("the controller's status write within %v of the hold: %v, want it held (FencingTokenMissing)", admission.MaxClusterControllerHold, err)
	}
	time.Sleep(time.Until(armed.Add(admission.MaxClusterControllerHold + 2*time.Second)))
	err = status(3)
	t.Logf("the controller's status write %v after the hold: %s", time.Since(armed).Round(time.Millisecond), round9Short(err))
	if err != nil {
		t.Errorf("the controller's status write %v after the hold: %v, want admitted", time.Since(armed).Round(time.Second), err)
	}
}
