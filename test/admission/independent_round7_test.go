package admission_test

// Round 7 of the independent attacker (against 8ddf943): the attacks that held, and those that worked and
// are closed (decision 0038). Each test asserts the invariant it tries to break: it fails while the
// attack works. What stays open is in open_holes_round7_test.go (build tag openholes).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round7Short is err's first 300 characters, for logs.
func round7Short(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// round7WaitFenced waits until the webhook refuses a tokenless dry-run create of a ConfigMap labelled
// probeLabels in ns.
func round7WaitFenced(t *testing.T, ns string, probeLabels map[string]string) {
	t.Helper()
	testenv.Eventually(t, "the webhook enforces the policy", func() (bool, string) {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: probeLabels}}
		err := env.Client.Create(t.Context(), probe, client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
}

// TestRound7FutureMarkerDisarmsTheHold: attack on I2 (headroom), by a user with RBAC on the objects only
// (an editor). held() takes whichever of the deletion marker and the hold carries the later epoch, and
// Decide then holds the object only if that epoch is the Lease's current one. Neither annotation is fenced
// before a policy covers the object, so the editor seeds a *future* one on the holder's ConfigMap while no
// policy covers it (delete-at-epoch=7 on one, hold-at-epoch=7 on the other). Then a FencingPolicy covers
// ConfigMaps (created mid-term: no acquisition raises the objects), and the holder (epoch 1) arms:
//   - its hold on "held" (the merge patch NewClient sends after losing a compare-and-swap: hold and epoch
//     record only; it leaves the seeded marker in place);
//   - its deletion marker on "marked" (NewClient.Delete's first step: marker and epoch record only; it
//     leaves the seeded hold in place).
//
// With the holder's hold or marker at the Lease's epoch armed, a write without the token (a finalizer)
// must be refused (decision 0031: it would change the resourceVersion the holder's next write carries).
// A control object without the seeded annotation shows the refusal.
// Observed (8ddf943): WORKED. The controls refuse the finalizer ("is held for the holder's next
// compare-and-swap write", "is being deleted ..."); with the seeded delete-at-epoch=7 the finalizer is
// admitted under the holder's hold-at-epoch=1, and with the seeded hold-at-epoch=7 under the holder's
// delete-at-epoch=1 (resourceVersion changes both times).
func TestRound7FutureMarkerDisarmsTheHold(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor")
	tok := holder.Acquire(t, ns, appLease, 1)
	editor := env.ClientAs(t, "editor")
	// The holder's ConfigMaps, from before any policy (its fenced client: it records the epoch).
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	for _, name := range []string{"held", "marked", "control-held", "control-marked"} {
		if err := retryRBAC(t, "the holder's ConfigMap", func() error {
			return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": "v"}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// The editor's seeds, while nothing covers the ConfigMaps (no webhook is even asked).
	for name, key := range map[string]string{"held": fencingv1alpha1.DeleteAtEpochAnnotation, "marked": fencingv1alpha1.HoldAtEpochAnnotation} {
		if err := patchConfigMap(t, editor, ns, name, fmt.Sprintf(`{"metadata":{"annotations":{%q:"7"}}}`, key)); err != nil {
			t.Fatalf("seeding %s on %s before coverage: %v", key, name, err)
		}
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	// The holder arms its hold (as NewClient's hold() does) and its marker (NewClient.Delete's first step).
	armAs := func(name, key string) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1",%q:"1"}}}`, key, fencingv1alpha1.ObjectEpochAnnotation)
		return holder.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(patch)), testenv.Presenting(1))
	}
	for _, c := range []struct{ name, key string }{
		{"control-held", fencingv1alpha1.HoldAtEpochAnnotation},
		{"held", fencingv1alpha1.HoldAtEpochAnnotation},
		{"control-marked", fencingv1alpha1.DeleteAtEpochAnnotation},
		{"marked", fencingv1alpha1.DeleteAtEpochAnnotation},
	} {
		if err := armAs(c.name, c.key); err != nil {
			t.Fatalf("the holder arms %s on %s: %v", c.key, c.name, err)
		}
		before := readConfigMap(t, ns, c.name)
		err := retryRBAC(t, "the editor's finalizer", func() error {
			return patchConfigMap(t, editor, ns, c.name, `{"metadata":{"finalizers":["example.com/editor"]}}`)
		})
		after := readConfigMap(t, ns, c.name)
		t.Logf("%s: holder armed %s=1 (annotations %v); the editor's tokenless finalizer: %v; resourceVersion %s -> %s",
			c.name, c.key, before.Annotations, round7Short(err), before.ResourceVersion, after.ResourceVersion)
		if err == nil {
			t.Errorf("%s: a write without the token was admitted while the holder's %s=1 (the Lease's epoch) was armed, resourceVersion %s -> %s: the seeded future annotation disarmed it (I2)",
				c.name, c.key, before.ResourceVersion, after.ResourceVersion)
			_ = patchConfigMap(t, env.Client, ns, c.name, `{"metadata":{"finalizers":null}}`)
		}
	}
}

// TestRound7NegativeSelectorFencesUnselectedObjects: attack on coverage ("nothing locks the holder, other
// users or the cluster's own controllers out of their normal writes" on objects no policy selects). The
// webhook finds the covering policy with the object's labels before and after the write, and on a CREATE
// the "before" labels are nil (no stored object), on a DELETE the "after" ones. A selector that matches
// the empty label set (matchExpressions DoesNotExist or NotIn) then covers every create and delete of the
// resource, whatever the object's labels. The policy fences ConfigMaps without the label
// fencekit.example/unfenced; an editor creates and deletes a ConfigMap labelled
// fencekit.example/unfenced=true (which the policy does not select): both must be admitted, as an update of
// it is.
// Observed (8ddf943): WORKED. The update of the unselected ConfigMap is admitted; its create is refused
// ("this write changes metadata.labels[fencekit.example/unfenced] but presents no fencing token") and its
// delete is refused ("is fenced by lease app-writer, held by app-operator at epoch 1").
func TestRound7NegativeSelectorFencesUnselectedObjects(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor")
	const key = "fencekit.example/unfenced"
	unselected := map[string]string{key: "true"}
	// An unselected ConfigMap from before the policy, for the delete.
	if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old", Labels: unselected}}); err != nil {
		t.Fatal(err)
	}
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps",
			Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpDoesNotExist}}}}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	holder.Acquire(t, ns, appLease, 1)
	round7WaitFenced(t, ns, nil)
	editor := env.ClientAs(t, "editor")
	upd := retryRBAC(t, "the editor's update of an unselected ConfigMap", func() error {
		return patchConfigMap(t, editor, ns, "old", `{"data":{"k":"v"}}`)
	})
	t.Logf("the editor updates unselected ConfigMap old (labels %v): %v", unselected, round7Short(upd))
	create := editor.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "new", Labels: unselected}})
	t.Logf("the editor creates unselected ConfigMap new (labels %v): %v", unselected, round7Short(create))
	del := editor.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "old"}})
	t.Logf("the editor deletes unselected ConfigMap old (labels %v): %v", unselected, round7Short(del))
	if upd != nil {
		t.Errorf("an update of a ConfigMap the policy does not select was refused: %v", upd)
	}
	if create != nil {
		t.Errorf("a create of a ConfigMap labelled %v, which FencingPolicy app (%s DoesNotExist) does not select, was refused: %v", unselected, key, create)
	}
	if del != nil {
		t.Errorf("a delete of a ConfigMap labelled %v, which FencingPolicy app (%s DoesNotExist) does not select, was refused: %v", unselected, key, del)
	}
}

// TestRound7HPAScaleRefusedWithoutWarning: attack on "nothing locks the cluster's own controllers out of
// their normal writes" (or, where the design accepts it, says so: a warning and ControllersRefused=True,
// as for the CronJob controller). A policy declares apps/deployments; the horizontal Pod autoscaler
// (kube-system:horizontal-pod-autoscaler, one of kube-controller-manager's ServiceAccounts) scales a
// Deployment through deployments/scale. The test makes that request as that ServiceAccount; if it is
// refused, the policy must carry ControllersRefused=True naming it (and its create must warn).
// Observed (8ddf943): WORKED. "Scale .../web: this write changes spec.replicas but presents no fencing
// token"; ControllersRefused=False (NoControllerRefused).
func TestRound7HPAScaleRefusedWithoutWarning(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const hpa = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "deployments", []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/scale"}, Verbs: []string{"*"}}}, hpa, holder.User)
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Group: "apps", Resource: "deployments"}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	tok := holder.Acquire(t, ns, appLease, 1)
	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	testenv.Eventually(t, "the webhook enforces the policy", func() (bool, string) {
		err := env.Client.Create(ctx, dep.DeepCopy(), client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	if err := retryRBAC(t, "the holder's Deployment", func() error { return fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, dep) }); err != nil {
		t.Fatal(err)
	}
	c := env.ClientAs(t, hpa)
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
	err := retryRBAC(t, "the autoscaler's scale", func() error {
		return c.SubResource("scale").Update(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}, client.WithSubResourceBody(scale))
	})
	t.Logf("the horizontal Pod autoscaler scales Deployment web to 3: %v", round7Short(err))
	cond := round6ControllersRefused(t, client.ObjectKeyFromObject(p))
	t.Logf("FencingPolicy %s/app: ControllersRefused %v", ns, cond)
	if err != nil && (cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "autoscaler")) {
		t.Errorf("the horizontal Pod autoscaler's scale of a covered Deployment is refused (%v) but FencingPolicy app does not say so (ControllersRefused %v)", round7Short(err), cond)
	}
}

// TestRound7CoOwnedFinalizersOutliveTheHoldersApply: attack on I4 (delete semantics) and "nothing is
// lost", by a user with RBAC on the objects only (an editor). Finalizers other than orphan and
// foregroundDeletion are free, and a write that leaves the deletion finalizers as they are may touch the
// finalizer list; managedFields may change within free paths, a holder's entry gaining and losing nothing.
// A server-side apply that lists finalizers the object already has changes no value and no holder's entry:
// it only adds the editor's Apply entry as a co-owner. Server-side apply removes a field the applier stops
// listing only if no other applier owns it. The holder applies (NewClient, server-side apply) ConfigMap
// "app" with finalizers orphan (its delete orphans the dependents) and app.example/cleanup; the editor
// applies the same two finalizers, unchanged, as field manager "editor". The holder then applies "app"
// without them (its delete should now be in the background, its cleanup done): both finalizers must be gone,
// as they are on a control ConfigMap the editor did not touch.
// Observed (8ddf943): WORKED. The editor's apply is admitted; on the control the holder's apply removes
// both finalizers, on "app" both stay: [orphan app.example/cleanup].
func TestRound7CoOwnedFinalizersOutliveTheHoldersApply(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	finalizers := []string{"orphan", "app.example/cleanup"}
	apply := func(c client.Client, name string, fins []string, data map[string]any, opts ...client.PatchOption) error {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": ns}}}
		if fins != nil {
			l := make([]any, len(fins))
			for i, f := range fins {
				l[i] = f
			}
			u.Object["metadata"].(map[string]any)["finalizers"] = l
		}
		if data != nil {
			u.Object["data"] = data
		}
		return c.Patch(ctx, u, client.Apply, opts...) //nolint:staticcheck // server-side apply as a raw patch, as NewClient stamps it
	}
	for _, name := range []string{"app", "control"} {
		if err := retryRBAC(t, "the holder's apply", func() error { return apply(fenced, name, finalizers, map[string]any{"k": "v1"}) }); err != nil {
			t.Fatalf("the holder applies %s: %v", name, err)
		}
	}
	err := retryRBAC(t, "the editor's apply", func() error {
		return apply(editor, "app", finalizers, nil, client.FieldOwner("editor"))
	})
	t.Logf("the editor applies the holder's finalizers %v to app, unchanged, as field manager \"editor\": %v", finalizers, round7Short(err))
	for _, name := range []string{"control", "app"} {
		if err := apply(fenced, name, nil, map[string]any{"k": "v2"}); err != nil {
			t.Fatalf("the holder applies %s without finalizers: %v", name, err)
		}
		got := readConfigMap(t, ns, name)
		t.Logf("%s after the holder's apply without finalizers: data %v, finalizers %v", name, got.Data, got.Finalizers)
		if len(got.Finalizers) > 0 {
			t.Errorf("%s: the holder's server-side apply without its finalizers was acknowledged but %v remain (co-owned by the editor's tokenless apply): its delete still orphans the dependents and waits for a cleanup it has done (I4, nothing lost)",
				name, got.Finalizers)
		}
		_ = patchConfigMap(t, env.Client, ns, name, `{"metadata":{"finalizers":null}}`)
	}
}

// TestRound7SchedulerSelectedNodeRefusedWithoutWarning: attack on "nothing locks the cluster's own
// controllers out of their normal writes" (or, where the design accepts it, says so: a warning and
// ControllersRefused=True). A policy declares persistentvolumeclaims; cluster-controllers.md lists only the
// volume binder (admitted) and the StatefulSet and ephemeral-volume controllers' creates (warned). For a
// claim of a WaitForFirstConsumer StorageClass, kube-scheduler records the node it picked in the claim's
// annotation volume.kubernetes.io/selected-node (and removes it to reschedule); without it the claim is never
// provisioned and the Pod never starts. The test sends that patch as system:kube-scheduler; if it is
// refused, the policy must say so.
// Observed (8ddf943): WORKED. "this write changes metadata.annotations[volume.kubernetes.io/selected-node]
// but presents no fencing token"; ControllersRefused=True names the StatefulSet and ephemeral-volume
// controllers for persistentvolumeclaims, not the scheduler.
func TestRound7SchedulerSelectedNodeRefusedWithoutWarning(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const scheduler = "system:kube-scheduler"
	hc := ruleHolder(t, ns, scheduler)
	if err := retryRBAC(t, "the holder's claim", func() error { return hc.Create(ctx, claim(ns, "data")) }); err != nil {
		t.Fatal(err)
	}
	err := patchDecided(t, "the scheduler's selected node", env.ClientAs(t, scheduler),
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"}},
		`{"metadata":{"annotations":{"volume.kubernetes.io/selected-node":"node-1"}}}`)
	t.Logf("kube-scheduler annotates the covered claim with its selected node: %v", round7Short(err))
	cond := round6ControllersRefused(t, types.NamespacedName{Namespace: ns, Name: "app"})
	t.Logf("FencingPolicy %s/app: ControllersRefused %v", ns, cond)
	if err != nil && (cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "scheduler")) {
		t.Errorf("kube-scheduler's selected-node annotation on a covered claim is refused (%v) but FencingPolicy app does not say so (ControllersRefused %v)", round7Short(err), cond)
	}
}

// TestRound7TokenControllerDeleteRefusedWithoutWarning: the same for Secrets. The tokens controller
// (kube-system:tokens-controller) fills a ServiceAccount token Secret (admitted) and deletes it once its
// ServiceAccount is gone (a token for a ServiceAccount that no longer exists). The test deletes the Secret
// as that ServiceAccount, with the Lease held; if it is refused, the policy must say so.
// Observed (8ddf943): WORKED. "Secret .../builder-token is fenced by lease app-writer ... only that holder's
// user ... may delete it"; ControllersRefused=True says "ServiceAccount token Secrets are filled", nothing
// of their deletes.
func TestRound7TokenControllerDeleteRefusedWithoutWarning(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const tokens = "system:serviceaccount:kube-system:tokens-controller"
	hc := ruleHolder(t, ns, tokens)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "builder-token",
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "builder"}}, Type: corev1.SecretTypeServiceAccountToken}
	if err := retryRBAC(t, "the holder's token Secret", func() error { return hc.Create(ctx, sec) }); err != nil {
		t.Fatal(err)
	}
	err := retryRBAC(t, "the tokens controller's delete", func() error {
		return env.ClientAs(t, tokens).Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "builder-token"}})
	})
	t.Logf("the tokens controller deletes the token Secret of a gone ServiceAccount: %v", round7Short(err))
	cond := round6ControllersRefused(t, types.NamespacedName{Namespace: ns, Name: "app"})
	t.Logf("FencingPolicy %s/app: ControllersRefused %v", ns, cond)
	if err != nil && (cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "tokens-controller")) {
		t.Errorf("the tokens controller's delete of a covered token Secret is refused (%v) but FencingPolicy app does not say so (ControllersRefused %v)", round7Short(err), cond)
	}
}

// TestRound7SecondDeleteFallsBackToTheOrphanDefault: attack on I4 (delete semantics), by a user with RBAC
// on the objects only (an editor). deletionChange models the apiserver's choice of deletion finalizers as
// "orphanDependents wins over propagationPolicy, which wins over the finalizers already there", and so
// admits a second DELETE without options as changing nothing. The apiserver has a fourth rule: with no
// option and no deletion finalizer it falls back to the resource's default garbage-collection policy,
// which is Orphan for core/v1 ReplicationControllers and batch/v1 Jobs (for backward compatibility). The
// holder deletes its ReplicationController and its Job with propagationPolicy=Background (their Pods are
// to go with them); each lingers on a finalizer (the holder's own cleanup); the editor sends a second
// DELETE without options. It must be refused, or leave the deletion as the holder chose it (no orphan
// finalizer).
// Observed (8ddf943): WORKED for both. The editor's second DELETE is admitted and the finalizers become
// [app.example/cleanup orphan] on the ReplicationController and on the Job.
func TestRound7SecondDeleteFallsBackToTheOrphanDefault(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "rcs", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"replicationcontrollers", "configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"*"}}}, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "replicationcontrollers"}, fencingv1alpha1.FencedObjects{Resource: "configmaps"},
		fencingv1alpha1.FencedObjects{Group: "batch", Resource: "jobs"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	labels := map[string]string{"app": "web"}
	podSpec := corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}
	rcSpec := podSpec
	rcSpec.RestartPolicy = corev1.RestartPolicyAlways
	cleanup := []string{"app.example/cleanup"}
	for _, obj := range []client.Object{
		&corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Finalizers: cleanup},
			Spec: corev1.ReplicationControllerSpec{Replicas: ptr.To(int32(1)), Selector: labels,
				Template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: rcSpec}}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "batch", Finalizers: cleanup},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: podSpec}}},
	} {
		kind := fmt.Sprintf("%T", obj)
		if err := retryRBAC(t, "the holder's "+kind, func() error { return fenced.Create(ctx, obj) }); err != nil {
			t.Fatal(err)
		}
		if err := fenced.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			t.Fatalf("the holder's background delete of %s: %v", kind, err)
		}
		key := client.ObjectKeyFromObject(obj)
		if err := env.Client.Get(ctx, key, obj); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s %s after the holder's background delete: deletionTimestamp %v, finalizers %v", kind, key.Name, obj.GetDeletionTimestamp(), obj.GetFinalizers())
		target := obj.DeepCopyObject().(client.Object)
		target.SetResourceVersion("")
		err := retryRBAC(t, "the editor's second delete", func() error { return env.ClientAs(t, "editor").Delete(ctx, target) })
		if gerr := env.Client.Get(ctx, key, obj); gerr != nil {
			t.Fatal(gerr)
		}
		t.Logf("%s %s: the editor's second DELETE without options: %v; finalizers now %v", kind, key.Name, round7Short(err), obj.GetFinalizers())
		if err == nil && containsString(obj.GetFinalizers(), "orphan") {
			t.Errorf("%s %s: a second DELETE without options by a user without the token was admitted and added the orphan finalizer (finalizers %v): the holder's background delete now orphans its Pods (I4)",
				kind, key.Name, obj.GetFinalizers())
		}
		_ = env.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	}
}

// TestRound7SecondDeleteFallsBackToTheDefaultGrace: attack on I4 (delete semantics: how soon a Pod goes),
// by a user with delete on pods (not the holder). deletionChange refuses a second DELETE whose
// gracePeriodSeconds is shorter than the deletion in progress, and admits one without options as changing
// nothing. But for a Pod the apiserver fills a missing gracePeriodSeconds with the Pod's
// spec.terminationGracePeriodSeconds (30 s by default) before it compares, and then shortens the deletion
// to it. The holder deletes its bound Pod with a 300 s grace period; the attacker sends a second DELETE
// without options. The grace period must stay 300 s.
// Observed (8ddf943): HELD. The apiserver keeps 300 s (it fills the default only for a first deletion).
func TestRound7SecondDeleteFallsBackToTheDefaultGrace(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/binding", "bindings"}, Verbs: []string{"*"}}},
		holder.User, "attacker", "system:kube-scheduler")
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if err := retryRBAC(t, "the holder's pod", func() error { return fenced.Create(ctx, pod) }); err != nil {
		t.Fatal(err)
	}
	if err := retryRBAC(t, "the scheduler's binding", func() error {
		return env.ClientAs(t, "system:kube-scheduler").Create(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}})
	}); err != nil {
		t.Fatal(err)
	}
	cur := testenv.Read[corev1.Pod](t, env.Client, ns, "p")
	if err := fenced.Delete(ctx, cur, client.GracePeriodSeconds(300)); err != nil {
		t.Fatalf("the holder's graceful delete: %v", err)
	}
	before := testenv.Read[corev1.Pod](t, env.Client, ns, "p")
	err := retryRBAC(t, "the attacker's delete", func() error {
		return env.ClientAs(t, "attacker").Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}})
	})
	got := testenv.Read[corev1.Pod](t, env.Client, ns, "p")
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), got, client.GracePeriodSeconds(0)) })
	t.Logf("holder's delete: grace %v, deletionTimestamp %v (spec.terminationGracePeriodSeconds %v); the attacker's second DELETE without options: %v; grace now %v, deletionTimestamp %v",
		ptr.Deref(before.DeletionGracePeriodSeconds, -1), before.DeletionTimestamp, ptr.Deref(before.Spec.TerminationGracePeriodSeconds, -1),
		round7Short(err), ptr.Deref(got.DeletionGracePeriodSeconds, -1), got.DeletionTimestamp)
	if g := got.DeletionGracePeriodSeconds; g == nil || *g != 300 {
		t.Errorf("a second DELETE without options by a user without the token shortened the holder's grace period from 300 s to %v s (I4)", ptr.Deref(g, -1))
	}
}

// TestRound7LeaseFinalizersFillTheLease: attack on I2/I3 (the Lease still leads), by another workload with
// the fencekit-elector role (update and patch on leases), never holding the Lease. The Lease policy bounds
// a fenced Lease's labels and annotations (64 entries, 252 KiB) so that the next acquisition keeps room
// for fencekit's own, and refuses ownerReferences, but does not look at metadata.finalizers. Every finalizer
// is stored twice (in the list, and in the writer's managedFields entry). The intruder fills the Lease with
// finalizers up to the size etcd accepts (it searches for the largest list the apiserver stores). Then
// another replica (a holder identity 30 bytes longer, as a rolling update's new Pod names are) acquires the
// next epoch, as pkg/elector writes it. The acquisition must succeed, and so must the holder's renewal.
// Observed (8ddf943): WORKED. About 6000 finalizers (1.57 MB as JSON) admitted by the Lease policy; the
// holder's renewal still passes (about 150 ms); the next acquisition fails with "etcdserver: request is too
// large".
func TestRound7LeaseFinalizersFillTheLease(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "fat"
	r1 := newWorker(t, ns, "app")
	r2 := newWorker(t, ns, "app")
	r2.Holder = "app-7f9c5d8b6-with-a-longer-pod-name"
	intruder := newWorker(t, ns, "intruder")
	tok1 := r1.Acquire(t, ns, lease, 1)
	ic := unthrottled(t, intruder.User)
	// Big finalizers (a 193-byte prefix, a 63-byte name) to come near the limit in few steps, then small ones,
	// then one of a chosen length.
	big := "." + strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + ".io/" + strings.Repeat("z", 63)
	fins := func(nBig, nSmall, last int) []byte {
		l := make([]string, 0, nBig+nSmall+1)
		for i := range nBig {
			l = append(l, fmt.Sprintf("p%06d%s", i, big))
		}
		for i := range nSmall {
			l = append(l, fmt.Sprintf("x.io/%06d", i))
		}
		if last > 0 {
			l = append(l, "y.io/"+strings.Repeat("z", last))
		}
		b := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": l}})
		return b
	}
	patch := func(b []byte) error {
		return ic.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease}}, client.RawPatch(types.MergePatchType, b))
	}
	if err := retryRBAC(t, "the intruder's first finalizer", func() error { return patch(fins(1, 0, 0)) }); err != nil {
		t.Fatalf("the intruder's first finalizer on the fenced Lease: %v", err)
	}
	// The largest list the apiserver stores: big finalizers, then small ones, then the longest last one.
	var lastErr error
	largest := func(lo, hi int, try func(int) error) int {
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if err := try(mid); err == nil {
				lo = mid
			} else {
				lastErr = err
				hi = mid - 1
			}
		}
		return lo
	}
	nBig := largest(1, 8000, func(n int) error { return patch(fins(n, 0, 0)) })
	nSmall := largest(0, 64, func(n int) error { return patch(fins(nBig, n, 0)) })
	last := largest(0, 60, func(n int) error { return patch(fins(nBig, nSmall, n)) })
	if err := patch(fins(nBig, nSmall, last)); err != nil {
		t.Fatalf("the intruder's final fill: %v", err)
	}
	l := env.ReadLease(t, ns, lease)
	t.Logf("the intruder (never a holder) stored %d finalizers on fenced Lease %s (%d bytes as JSON); the first refused fill: %v",
		len(l.Finalizers), lease, len(mustJSON(t, l)), round7Short(lastErr))
	start := time.Now()
	r1.Renew(t, tok1)
	t.Logf("the holder's renewal took %v", time.Since(start))
	var cur coordinationv1.Lease
	if err := r2.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &cur); err != nil {
		t.Fatal(err)
	}
	testenv.AcquiredBy(&cur, r2.User, r2.Holder, 2, 15*time.Second)
	start = time.Now()
	err := r2.Client.Update(ctx, &cur, testenv.Presenting(2))
	t.Logf("replica %s acquires at epoch 2 (took %v): %v", r2.Holder, time.Since(start), round7Short(err))
	if err != nil {
		t.Errorf("the next acquisition of the fenced Lease fails after another elector-role workload filled it with finalizers (I2/I3: the Lease still leads): %v", round7Short(err))
	}
	_ = env.Client.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
}

// TestRound7QuotaAdmissionLocksOutCreates: attack on "nothing locks the holder or the cluster's own
// controllers out of their normal writes" (or, where the design accepts it, says so). A policy declares
// resourcequotas (and configmaps). The apiserver's ResourceQuota admission plugin charges every create of a
// quota-tracked object (here a ConfigMap) by updating the covering ResourceQuota's status.used itself,
// under the apiserver's own loopback identity, without a token. The holder's ResourceQuota is initialised
// by the resourcequota controller (a status write, free). Then the holder creates a ConfigMap with its
// token, and an editor creates a Secret, which no policy declares: both creates must succeed, or the policy
// must say that declaring resourcequotas blocks them.
// Observed (8ddf943): WORKED. Both creates fail with "ResourceQuota .../quota: this write changes
// status.used[count/...] but presents no fencing token"; ControllersRefused=False.
func TestRound7QuotaAdmissionLocksOutCreates(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const rqc = "system:serviceaccount:kube-system:resourcequota-controller"
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User)
	env.Grant(t, ns, "quotas", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"resourcequotas", "resourcequotas/status"}, Verbs: []string{"*"}}}, holder.User, rqc)
	env.Grant(t, ns, "secrets", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}}}, "editor")
	p := declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "resourcequotas"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quota"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": resource.MustParse("50"), "count/secrets": resource.MustParse("50")}}}
	if err := retryRBAC(t, "the holder's quota", func() error { return fenced.Create(ctx, rq) }); err != nil {
		t.Fatal(err)
	}
	// The resourcequota controller's first sync: status.hard and status.used.
	var list corev1.ConfigMapList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var secrets corev1.SecretList
	if err := env.Client.List(ctx, &secrets, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	status := fmt.Sprintf(`{"status":{"hard":{"count/configmaps":"50","count/secrets":"50"},"used":{"count/configmaps":"%d","count/secrets":"%d"}}}`,
		len(list.Items), len(secrets.Items))
	if err := retryRBAC(t, "the resourcequota controller's sync", func() error {
		return env.ClientAs(t, rqc).Status().Patch(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quota"}},
			client.RawPatch(types.MergePatchType, []byte(status)))
	}); err != nil {
		t.Fatalf("the resourcequota controller's status write: %v", err)
	}
	err := fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"k": "v"}})
	t.Logf("the holder creates a ConfigMap with its token, under its ResourceQuota: %v", round7Short(err))
	secretErr := retryRBAC(t, "the editor's Secret", func() error {
		return env.ClientAs(t, "editor").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unfenced"}})
	})
	t.Logf("an editor creates a Secret (no policy declares secrets), under the same ResourceQuota: %v", round7Short(secretErr))
	cond := round6ControllersRefused(t, client.ObjectKeyFromObject(p))
	t.Logf("FencingPolicy %s/app: ControllersRefused %v", ns, cond)
	if (err != nil || secretErr != nil) && (cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "resourcequotas")) {
		t.Errorf("once a ResourceQuota is covered, the holder's create of a quota-tracked object (%v) and an editor's create of an undeclared Secret (%v) are refused, and FencingPolicy app does not say so (ControllersRefused %v) (I2)",
			round7Short(err), round7Short(secretErr), cond)
	}
}

// TestRound7FinalizerClaimThenRemoval: attack on I4 and "nothing is lost", by a user with RBAC on the
// objects only (an editor): does a managedFields claim on a finalizer survive the finalizer's removal? The
// editor applies finalizer app.example/cleanup (free) as field manager "editor", then removes it with a
// merge patch (free). If the apiserver kept the editor's Apply claim, the holder's later apply that adds
// the same finalizer and its apply that drops it again would leave it in place (as in
// TestRound7CoOwnedFinalizersOutliveTheHoldersApply). The holder's second apply must remove it.
// Observed (8ddf943): HELD. The merge patch's removal drops the claim from every entry; the holder's later
// apply without the finalizer removes it.
func TestRound7FinalizerClaimThenRemoval(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	apply := func(c client.Client, fins []any, opts ...client.PatchOption) error {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "app", "namespace": ns}, "data": map[string]any{"k": "v"}}}
		if fins != nil {
			u.Object["metadata"].(map[string]any)["finalizers"] = fins
		}
		return c.Patch(ctx, u, client.Apply, opts...) //nolint:staticcheck // server-side apply as a raw patch
	}
	if err := retryRBAC(t, "the holder's apply", func() error { return apply(fenced, nil) }); err != nil {
		t.Fatal(err)
	}
	claim := retryRBAC(t, "the editor's claim", func() error {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "app", "namespace": ns, "finalizers": []any{"app.example/cleanup"}}}}
		return editor.Patch(ctx, u, client.Apply, client.FieldOwner("editor")) //nolint:staticcheck // as above
	})
	removal := patchConfigMap(t, editor, ns, "app", `{"metadata":{"finalizers":null}}`)
	got := readConfigMap(t, ns, "app")
	var owners []string
	for _, e := range got.ManagedFields {
		if e.FieldsV1 != nil && strings.Contains(e.FieldsV1.GetRawString(), "app.example/cleanup") {
			owners = append(owners, e.Manager)
		}
	}
	t.Logf("the editor claims the finalizer by apply: %v; removes it by merge patch: %v; finalizers now %v, entries still naming it %v",
		round7Short(claim), round7Short(removal), got.Finalizers, owners)
	if err := apply(fenced, []any{"app.example/cleanup"}); err != nil {
		t.Fatal(err)
	}
	if err := apply(fenced, nil); err != nil {
		t.Fatal(err)
	}
	got = readConfigMap(t, ns, "app")
	t.Logf("after the holder applies the finalizer and then applies without it: finalizers %v", got.Finalizers)
	if len(got.Finalizers) > 0 || len(owners) > 0 {
		t.Errorf("a finalizer claim survived its removal (entries %v) and the holder's apply without the finalizer leaves %v", owners, got.Finalizers)
	}
	_ = patchConfigMap(t, env.Client, ns, "app", `{"metadata":{"finalizers":null}}`)
}
