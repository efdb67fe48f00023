package operator_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// Attacks on the admission core (internal/operator/admission and its webhook adapters), on the real apiserver.
// Each subtest says what it tries and which check stops it.

// acquireErr is Worker.Acquire returning the error instead of failing the test.
func acquireErr(t *testing.T, w worker, ns, name string, epoch int64) error {
	t.Helper()
	var lease coordinationv1.Lease
	if err := w.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &lease); err != nil {
		return err
	}
	testenv.AcquiredBy(&lease, w.User, w.Holder, epoch, 15*time.Second)
	if f := w.Fences.String(); f != "" {
		lease.Annotations[elector.FencesAnnotation] = f
	}
	return w.Client.Update(t.Context(), &lease, testenv.Presenting(epoch))
}

// isForbiddenByRBAC reports whether err is RBAC's refusal (it takes effect a moment after a grant).
func isForbiddenByRBAC(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot ") && !strings.Contains(err.Error(), "denied")
}

func TestCoreAttacks(t *testing.T) {
	a := startCopyAttack(t)
	ctx := t.Context()
	objects := elector.Fences{Objects: true}

	// A policy that names Leases under another spelling ("" group, or the singular) would resolve through
	// the RESTMapper; fence-on-acquire would then list the Leases and "raise" their epoch annotation, which
	// is the Lease's own epoch, and every acquisition would fail. The policy webhook takes a resource only
	// as the apiserver serves it: exact group, plural name.
	t.Run("a policy that covers Leases under another spelling", func(t *testing.T) {
		for _, res := range []fencingv1alpha1.FencedObjects{{Group: "", Resource: "leases"}, {Group: "coordination.k8s.io", Resource: "lease"}} {
			ns := env.Namespace(t)
			holder := newWorker(t, ns, "app-operator")
			holder.Fences = objects
			grantPolicies(t, ns, holder.User)
			env.Grant(t, ns, "lease-patcher", []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"patch"}}}, holder.User)
			holder.Acquire(t, ns, "l", 1)
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leases"},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{res}}}
			if err := env.Client.Create(ctx, p); err != nil {
				continue // refused: safe
			}
			tok := holder.Acquire(t, ns, "l", 2)
			err := retryRBAC(t, "fence-on-acquire", func() error { return fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, tok) })
			if err != nil {
				t.Errorf("policy %+v admitted, and fence-on-acquire at epoch 2 fails: %v", res, err)
			}
		}
	})

	// A policy naming a resource in a spelling the webhook rule never matches (singular, or the core group
	// for an apps resource) would fence nothing: it is refused.
	t.Run("a policy names a resource the webhook rule never matches", func(t *testing.T) {
		ns := env.Namespace(t)
		for i, res := range []fencingv1alpha1.FencedObjects{{Resource: "configmap"}, {Group: "", Resource: "deployments"}} {
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%d", i)},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{res}}}
			if err := env.Client.Create(ctx, p); err == nil {
				t.Errorf("FencingPolicy naming %q in group %q admitted: its webhook rule matches no request", res.Resource, res.Group)
			}
		}
	})

	// A deletion marker seeded before coverage at the Lease's next epoch must not make that acquisition's
	// raise fail: the raise removes any marker.
	t.Run("a seeded deletion marker at the next epoch", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := newWorker(t, ns, "app-operator")
		holder.Fences = objects
		grantObjects(t, ns, holder.User, "editor")
		grantPolicies(t, ns, holder.User)
		editor := userClient(t, "editor")
		seeded := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "seeded",
			Annotations: map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: "2"}}, Data: map[string]string{"v": "seeded"}}
		testenv.Eventually(t, "the editor seeds the marker", func() (bool, string) { err := editor.Create(ctx, seeded.DeepCopy()); return err == nil, errString(err) })
		declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
		t1 := holder.Acquire(t, ns, appLease, 1)
		if err := fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, t1); err != nil {
			t.Fatal(err)
		}
		t2 := holder.Acquire(t, ns, appLease, 2)
		if err := fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, t2); err != nil {
			t.Errorf("fence-on-acquire at epoch 2 over a marker seeded before coverage: %v", err)
		}
	})

	// A deletion marker seeded before coverage at the Lease's current epoch must neither let a stale
	// replica's bare DELETE through nor make the holder's server-side apply fail. A delete under a live
	// Lease also carries the stored resourceVersion as its precondition (pkg/fencing's clients send the
	// marker write's), which no bare DELETE does; a write may keep a marker.
	t.Run("a seeded deletion marker at the current epoch", func(t *testing.T) {
		ns := env.Namespace(t)
		r1, r2 := replicas(t, ns)
		grantObjects(t, ns, r1.User, "editor")
		editor := userClient(t, "editor")
		r1.Acquire(t, ns, appLease, 1)
		t2 := r2.Acquire(t, ns, appLease, 2)
		for _, name := range []string{"del", "apply"} {
			seeded := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Annotations: map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: "2"}}, Data: map[string]string{"v": "seeded"}}
			testenv.Eventually(t, "the editor seeds the marker", func() (bool, string) { err := editor.Create(ctx, seeded.DeepCopy()); return err == nil, errString(err) })
		}
		declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
		mustContain(t, "a stale replica's bare DELETE on a seeded marker",
			r1.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "del"}}), nil, "ConfigMap "+ns+"/del")
		hc := fencing.NewClient(r2.Client, tokenOf(t2))
		if err := hc.Apply(ctx, corev1ac.ConfigMap("apply", ns).WithData(map[string]string{"v": "holder"})); err != nil {
			t.Errorf("the holder's server-side apply over a seeded marker: %v", err)
		}
	})

	// 16 tokenless appliers co-owning the same 64 KiB of a FencedResource's annotations would put 1 MB
	// of managedFields on it, and the holder's apply of data within MaxDataBytes would then fail
	// ("etcdserver: request is too large"). The bytes of the entries that own only free fields are bounded.
	t.Run("free managers co-own the free metadata", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := newWorker(t, ns, "app-operator")
		grantFencedResources(t, ns, "editor")
		editor := userClient(t, "editor")
		padded, control := declare(t, ns, "padded", "l"), declare(t, ns, "control", "l")
		prefix := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60)
		ann := map[string]string{}
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s/k%04d%s", prefix, i, strings.Repeat("x", 50))
			ann[k] = ""
			if b, _ := json.Marshal(ann); len(b) > admission.MaxFreeMetadataBytes-2048 {
				delete(ann, k)
				break
			}
		}
		body, _ := json.Marshal(map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
			"metadata": map[string]any{"name": padded.Name, "namespace": ns, "annotations": ann}})
		for i := range admission.MaxFreeManagers {
			fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: padded.Name}}
			if err := retryRBAC(t, "an applier's write", func() error {
				return editor.Patch(ctx, fr, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(fmt.Sprintf("padder-%02d", i)))
			}); err != nil {
				break
			}
		}
		nested := map[string]any{}
		for i := 0; ; i++ {
			k := fmt.Sprintf("key-%05d-%s", i, strings.Repeat("k", 20))
			nested[k] = 1
			if b, _ := json.Marshal(nested); len(b) > fencingv1alpha1.MaxDataBytes-64 {
				delete(nested, k)
				break
			}
		}
		holder.LeaseDuration = 10 * time.Minute
		tok := holder.Acquire(t, ns, "l", 1)
		apply := func(key types.NamespacedName) error {
			body, _ := json.Marshal(map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
				"metadata": map[string]any{"name": key.Name, "namespace": ns, "annotations": map[string]string{fencingv1alpha1.WriterAnnotation: tok.Holder}},
				"spec":     map[string]any{"leaseName": "l", "epoch": tok.Epoch, "data": map[string]any{"n": nested}}})
			return holder.Client.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
				client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(tok.FieldManager()), client.ForceOwnership)
		}
		if err := apply(control); err != nil {
			t.Fatal(err)
		}
		if err := apply(padded); err != nil {
			t.Errorf("the holder's apply within MaxDataBytes after 16 tokenless appliers: %v", err)
		}
	})

	// If owner references were free on a FencedResource's create, an editor could declare one owned by an
	// object it controls, let the holder write data into it, then delete the owner: the garbage collector,
	// which is exempt, would delete the holder's data while the Lease is live. They need the token on
	// create too.
	t.Run("an editor creates a FencedResource owned by an object it controls", func(t *testing.T) {
		ns := env.Namespace(t)
		env.Grant(t, ns, "fr-creator", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencedresources"},
			Verbs: []string{"create"}}}, "editor")
		editor := userClient(t, "editor")
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "editors", UID: "00000000-0000-0000-0000-0000000000ee"}}},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "l"}}
		err := retryRBAC(t, "the editor's create", func() error { return editor.Create(ctx, fr.DeepCopy()) })
		mustContain(t, "an editor's create of a FencedResource with an owner", err, fencing.IsTokenMissing, "FencedResource "+ns+"/owned", "metadata.ownerReferences")
	})

	// HOLDS: a user with RBAC on FencingPolicies only declares a policy that covers Leases. Were it
	// admitted, every Lease write would go through the object webhook too, and the epoch record of the
	// policy's objects is the Lease's own epoch annotation: the next acquisition would present epoch 2 while
	// the Lease is at 1 ("never issued"), and nobody could acquire the Lease again. The policy is refused.
	t.Run("a policy that covers Leases", func(t *testing.T) {
		ns := a.namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Acquire(t, ns, "l", 1)
		env.Grant(t, ns, "policy-writer", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencingpolicies"},
			Verbs: []string{"*"}}}, "gitops")
		gitops := userClient(t, "gitops")
		p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leases"},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{{Group: "coordination.k8s.io", Resource: "leases"}}}}
		err := retryRBAC(t, "the policy write", func() error { return gitops.Create(ctx, p) })
		if err == nil {
			t.Fatalf("a FencingPolicy covering leases was admitted")
		}
		if !strings.Contains(err.Error(), "leases cannot be fenced by a FencingPolicy") {
			t.Errorf("the refusal does not say why: %v", err)
		}
		if err := acquireErr(t, r2, ns, "l", 2); err != nil {
			t.Errorf("replica-2's acquisition at epoch 2: %v", err)
		}
	})

	// HOLDS: a user with RBAC on ConfigMaps only (an editor, a GitOps tool, kubectl) changes a covered
	// ConfigMap's data in every shape a client can send: JSON patch, strategic merge patch, server-side
	// apply with force, a dry run, a create with generateName. Each is refused, naming the object.
	t.Run("an editor's writes in every shape", func(t *testing.T) {
		ns := a.namespace(t)
		holder, tok := configMapHolder(t, ns, "editor")
		if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
			Data: map[string]string{"v": "holder"}}); err != nil {
			t.Fatal(err)
		}
		editor := userClient(t, "editor")
		cm := func() *corev1.ConfigMap {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
		}
		for name, write := range map[string]func() error{
			"a JSON patch": func() error {
				return editor.Patch(ctx, cm(), client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/v","value":"editor"}]`)))
			},
			"a strategic merge patch": func() error {
				return editor.Patch(ctx, cm(), client.RawPatch(types.StrategicMergePatchType, []byte(`{"data":{"v":"editor"}}`)))
			},
			"a server-side apply with force": func() error {
				return editor.Patch(ctx, cm(), client.RawPatch(types.ApplyPatchType,
					fmt.Appendf(nil, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"app","namespace":%q},"data":{"v":"editor"}}`, ns)),
					client.FieldOwner("kubectl"), client.ForceOwnership)
			},
			"a dry run": func() error {
				return editor.Patch(ctx, cm(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"editor"}}`)), client.DryRunAll)
			},
			"a field manager that looks like a token": func() error {
				return editor.Patch(ctx, cm(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"editor"}}`)), client.FieldOwner("fencing.fencekit.io/epoch=01"))
			},
		} {
			err := retryRBAC(t, name, write)
			if name == "a field manager that looks like a token" {
				mustContain(t, name, err, func(err error) bool { return fencing.ReasonOf(err) == fencing.ReasonInvalid }, "ConfigMap "+ns+"/app", `"fencing.fencekit.io/epoch=01" is not a valid fencing token`)
				continue
			}
			mustContain(t, name, err, fencing.IsTokenMissing, "ConfigMap "+ns+"/app", "data.v")
		}
		gen := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "gen-"}, Data: map[string]string{"v": "editor"}}
		mustContain(t, "a create with generateName", editor.Create(ctx, gen), fencing.IsTokenMissing, "ConfigMap "+ns+"/gen-", "data.v")
		if got := readConfigMap(t, ns, "app").Data["v"]; got != "holder" {
			t.Errorf("the ConfigMap holds %q, want the holder's", got)
		}
	})

	// HOLDS: the garbage collector's exemptions are for removing owners and deleting; impersonating its
	// user does not let one add an owner (an owner deletes) or change data.
	t.Run("the garbage collector's user adds an owner or changes data", func(t *testing.T) {
		ns := a.namespace(t)
		holder, tok := configMapHolder(t, ns, admission.GarbageCollectorUser, admission.NamespaceControllerUser)
		if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
			Data: map[string]string{"v": "holder"}}); err != nil {
			t.Fatal(err)
		}
		gc := userClient(t, admission.GarbageCollectorUser)
		owner := `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"00000000-0000-0000-0000-000000000001"}]}}`
		err := retryRBAC(t, "the GC's write", func() error { return patchConfigMap(t, gc, ns, "app", owner) })
		mustContain(t, "the GC's user adds an owner", err, fencing.IsTokenMissing, "ConfigMap "+ns+"/app", "metadata.ownerReferences")
		mustContain(t, "the GC's user changes data", patchConfigMap(t, gc, ns, "app", `{"data":{"v":"gc"}}`), fencing.IsTokenMissing, "data.v")
		mustContain(t, "the namespace controller deletes in a live namespace",
			userClient(t, admission.NamespaceControllerUser).Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}),
			fencing.IsNotHolder, "ConfigMap "+ns+"/app is fenced by lease "+appLease)
	})

	// HOLDS: two policies bound to one Lease, with disjoint selectors. With the copy stalled at epoch 1,
	// the stale holder moves a ConfigMap from one policy's selector to the other's after the new holder's
	// fence-on-acquire: it stays covered (the copy may decide), but the fence raised it through the first
	// policy, so the write is refused stale.
	t.Run("a stale holder moves an object between two policies of its Lease", func(t *testing.T) {
		ns := a.namespace(t)
		r1, r2 := objectReplicas(t, ns)
		grantObjects(t, ns, r1.User)
		grantPolicies(t, ns, r1.User)
		for _, v := range []string{"a", "b"} {
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps",
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}}}}}
			if err := env.Client.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, "the webhook refuses an unfenced write of a ConfigMap labelled app="+v, func() (bool, string) {
				probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{"app": v}}}
				err := env.Client.Create(ctx, probe, client.DryRunAll)
				return fencing.IsTokenMissing(err), errString(err)
			})
		}
		_, c1 := holderClient(t, r1, ns, "l", 1)
		testenv.Eventually(t, "replica-1 creates the ConfigMap (RBAC granted)", func() (bool, string) {
			err := c1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: map[string]string{"app": "a"}}})
			return err == nil, errString(err)
		})
		a.seen(t, ns, "l", 1, r1.Holder)
		onCopy(t, "objects", "replica-1's write at epoch 1", func() error { return patchConfigMap(t, c1, ns, "m", `{"data":{"v":"one"}}`) })

		a.s.set(true)
		acquireAndFence(t, r2, ns, "l", 2)
		mustContain(t, "replica-1 moves the ConfigMap to policy b at epoch 1, the copy stalled",
			patchConfigMap(t, c1, ns, "m", `{"metadata":{"labels":{"app":"b"}},"data":{"v":"late"}}`), fencing.IsStale, "stale epoch 1")
		a.s.set(false)
		if got := readConfigMap(t, ns, "m"); got.Labels["app"] != "a" || got.Data["v"] != "one" {
			t.Errorf("the ConfigMap is %v %v after the stale write, want app=a, v=one", got.Labels, got.Data)
		}
	})
}
