//go:build openholes

package admission_test

// Round 7 of the independent attacker: what stays open, each a residual docs/design/residuals.md names.
// Each test asserts the invariant it tries to break: it fails while the attack works. Run with
//
//	go test -tags openholes -count=1 -run 'TestRound7' -v ./test/admission/

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
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

// TestRound7SeededMarkerLetsAStaleReplicaDelete: attack on I1 (deletion by a stale holder), by a user with
// RBAC on the objects only (an editor) and a stale replica of the holder's user. residuals.md accepts that a
// stale replica of the same user may delete, with a resourceVersion it read, an object "the current holder
// had marked for deletion". But a deletion marker is not fenced before a policy covers the object, and a
// policy created mid-term raises nothing: the editor seeds delete-at-epoch=2 (a future epoch) on ConfigMap
// "app" while no policy covers it; a FencingPolicy then covers it; replica-2 acquires at epoch 2 (the same
// user as replica-1) and never marks "app". Replica-1, stale at epoch 1, reads "app" and deletes it naming
// the resourceVersion it read (as a controller-runtime client with client.Preconditions does). It must be
// refused: the current holder marked nothing. Subtest "true": replica-2's acquisition raises the objects
// (fence-on-acquire for objects, which pkg/elector offers but fencekit run and fencekit elect do not), which
// removes the seeded marker.
// Observed (8ddf943): WORKED without an object fence (replica-1's DELETE with the resourceVersion it read is
// admitted); HELD with replica-2's object fence (the raise removed the marker;
// "a DELETE carries no fencing token, so the holder first writes the annotation ...").
func TestRound7SeededMarkerLetsAStaleReplicaDelete(t *testing.T) {
	operatortest.Start(t, env)
	for _, fences := range []bool{false, true} {
		t.Run(fmt.Sprintf("replica-2 fences objects on acquire: %v", fences), func(t *testing.T) {
			ctx := t.Context()
			ns := env.Namespace(t)
			r1, r2 := replicas(t, ns)
			grantObjects(t, ns, r1.User, "editor")
			grantPolicies(t, ns, r1.User)
			t1 := r1.Acquire(t, ns, appLease, 1)
			if err := retryRBAC(t, "replica-1's ConfigMap", func() error {
				return fencing.NewClient(r1.Client, tokenOf(t1)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"k": "v"}})
			}); err != nil {
				t.Fatal(err)
			}
			editor := env.ClientAs(t, "editor")
			if err := retryRBAC(t, "the editor's seed", func() error {
				return patchConfigMap(t, editor, ns, "app", fmt.Sprintf(`{"metadata":{"annotations":{%q:"2"}}}`, fencingv1alpha1.DeleteAtEpochAnnotation))
			}); err != nil {
				t.Fatalf("the editor seeds a future marker before coverage: %v", err)
			}
			declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
			if fences {
				r2.Fences = protocol.Fences{Objects: true}
				acquireAndFence(t, r2, ns, appLease, 2)
			} else {
				r2.Acquire(t, ns, appLease, 2)
			}
			var seen corev1.ConfigMap
			if err := r1.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "app"}, &seen); err != nil {
				t.Fatal(err)
			}
			rv := seen.ResourceVersion
			err := r1.Client.Delete(ctx, &seen, client.Preconditions{ResourceVersion: &rv})
			t.Logf("replica-1 (stale at epoch 1; Lease at epoch 2, held by replica-2, which never marked it) deletes app (annotations %v) with precondition resourceVersion %s: %v",
				seen.Annotations, rv, round7Short(err))
			if err == nil {
				t.Errorf("a stale replica deleted ConfigMap app, which the current holder never marked for deletion (the marker was seeded by a user without the token before coverage) (I1)")
			}
		})
	}
}

// TestRound7OtherVersionPrunesTheHoldersField: attack on I1 (content) and "nothing is lost", by a user with
// RBAC on the objects only (an editor), through another version of a declared custom resource. A policy
// declares gizmos of a CRD served at v1 (storage; spec.size and spec.color) and v2 (spec.size only; the
// conversion strategy None). The holder writes a Gizmo through v1 with both fields. The editor adds a free
// finalizer through v2. Whatever the apiserver does with spec.color on that route, the holder's data must
// survive it, or the write must be refused.
// Observed (8ddf943): WORKED. The editor's finalizer through v2 is admitted and spec.color is gone from
// the stored object (spec through v1 now map[size:3]).
func TestRound7OtherVersionPrunesTheHoldersField(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const group = round7GizmoGroup
	gizmo := round7Gizmos(t, ns)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "gizmos", []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{"gizmos"}, Verbs: []string{"*"}}}, holder.User, "editor")
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Group: group, Resource: "gizmos"})
	tok := holder.Acquire(t, ns, appLease, 1)
	g := gizmo("v1")
	g.Object["spec"] = map[string]any{"size": int64(3), "color": "red"}
	if err := retryRBAC(t, "the holder's gizmo", func() error { return fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, g) }); err != nil {
		t.Fatal(err)
	}
	read := func(version string) map[string]any {
		u := gizmo(version)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			t.Fatal(err)
		}
		spec, _ := u.Object["spec"].(map[string]any)
		return spec
	}
	t.Logf("the holder's gizmo: through v1 spec %v, through v2 spec %v", read("v1"), read("v2"))
	editor := env.ClientAs(t, "editor")
	for _, c := range []struct{ what, patch string }{
		{"a finalizer (merge patch)", `{"metadata":{"finalizers":["example.com/hold"]}}`},
		{"no change at all (empty merge patch)", `{}`},
	} {
		err := retryRBAC(t, "the editor's v2 write", func() error {
			return editor.Patch(ctx, gizmo("v2"), client.RawPatch(types.MergePatchType, []byte(c.patch)))
		})
		spec := read("v1")
		t.Logf("the editor writes %s through v2: %v; spec through v1 now %v", c.what, round7Short(err), spec)
		if spec["color"] != "red" || spec["size"] != int64(3) {
			t.Errorf("after the editor's tokenless write of %s through v2 (%v), the holder's spec reads %v through v1, was {size: 3, color: red} (I1, nothing lost)", c.what, round7Short(err), spec)
			return
		}
	}
	_ = editor.Patch(ctx, gizmo("v1"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
}

// TestRound7UnfencedOwnerDeletesThroughTheCollector: attack on I1 (ownership, deletion) through the
// garbage collector, by a user with RBAC on another resource only (an editor who may delete Secrets).
// deletion.md admits every garbage-collector write because "owner references are fenced, so those are
// owners the holder set". But nothing requires the owner itself to be fenced: the holder's ConfigMaps
// (covered) name as owner the holder's Secret "owner" (no policy covers Secrets). The editor deletes that
// Secret, once with propagationPolicy=Orphan and once in the background; the garbage collector then does
// what those deletes ask (played here under its own ServiceAccount, as kube-controller-manager runs it):
// it strips the owner reference from one ConfigMap and deletes the other. Neither change of the holder's
// fenced objects presented the token, and neither was asked for by the holder: one of them must be refused
// (the GC's write, or better the holder's write that names an owner outside its Lease's fence).
// Observed (8ddf943): WORKED. The editor's deletes of the Secrets are admitted (no policy covers Secrets);
// the collector's removal of the owner reference and its delete of the ConfigMap are both admitted.
func TestRound7UnfencedOwnerDeletesThroughTheCollector(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const gc = "system:serviceaccount:kube-system:generic-garbage-collector"
	holder, tok := configMapHolder(t, ns, gc)
	env.Grant(t, ns, "secrets", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}}}, holder.User, "editor")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	owners := map[string]*corev1.Secret{}
	for _, name := range []string{"orphaned", "collected"} {
		owner := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner-of-" + name}}
		if err := retryRBAC(t, "the holder's owner", func() error { return holder.Client.Create(ctx, owner) }); err != nil {
			t.Fatal(err)
		}
		owners[name] = owner
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Secret", Name: owner.Name, UID: owner.UID}}}, Data: map[string]string{"k": "v"}}
		if err := fenced.Create(ctx, cm); err != nil {
			t.Fatalf("the holder's ConfigMap %s owned by its Secret: %v", name, err)
		}
	}
	editor := env.ClientAs(t, "editor")
	for name, policy := range map[string]metav1.DeletionPropagation{"orphaned": metav1.DeletePropagationOrphan, "collected": metav1.DeletePropagationBackground} {
		err := retryRBAC(t, "the editor's delete of the owner", func() error { return editor.Delete(ctx, owners[name], client.PropagationPolicy(policy)) })
		t.Logf("the editor deletes Secret %s (propagation %s), owner of the holder's ConfigMap %s: %v", owners[name].Name, policy, name, round7Short(err))
	}
	gcc := env.ClientAs(t, gc)
	orphanErr := retryRBAC(t, "the collector's orphaning", func() error {
		return patchConfigMap(t, gcc, ns, "orphaned", `{"metadata":{"ownerReferences":null}}`)
	})
	collectErr := gcc.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "collected"}})
	t.Logf("the garbage collector strips the owner of ConfigMap orphaned: %v; it deletes ConfigMap collected: %v", round7Short(orphanErr), round7Short(collectErr))
	if orphanErr == nil && collectErr == nil {
		t.Errorf("a user without the token (and without RBAC on ConfigMaps) had the garbage collector change the owners of one of the holder's fenced ConfigMaps and delete another, by deleting their unfenced owner (I1)")
	}
}

// TestRound7DeclarationSquatsAnotherLease: attack on I2 (the holder's next Writer.Set must not fail), by a
// user with create RBAC on FencedResources only (a declarer). Declaring is free, spec.leaseName included,
// and spec.leaseName is immutable. The declarer declares FencedResource "orders" bound to Lease "nobody"
// (which does not exist) before the holder of Lease "l" first writes it. The holder's Writer.Set of
// "orders" must succeed, or the holder must at least be able to clear the squat (its elector role has no
// delete; a delete of a resource whose Lease is missing is free for anyone with RBAC).
// Observed (8ddf943): WORKED. Writer.Set: "FencedResource .../orders is bound to lease .../nobody, not to
// the token's lease .../l"; the holder's delete is forbidden by RBAC (the elector role has no delete).
func TestRound7DeclarationSquatsAnotherLease(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	declarer := round6Declarer(t, ns)
	tok := holder.Acquire(t, ns, "l", 1)
	if err := declarer.Create(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "nobody"}}); err != nil {
		t.Fatalf("the declarer's squat: %v", err)
	}
	_, err := fencing.NewWriter(holder.Client).Set(ctx, tok, types.NamespacedName{Namespace: ns, Name: "orders"}, map[string]any{"v": 1})
	t.Logf("the holder of lease l sets FencedResource orders (declared by another user, bound to lease nobody): %v", round7Short(err))
	delErr := holder.Client.Delete(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}})
	t.Logf("the holder deletes the squat: %v", round7Short(delErr))
	if err != nil && delErr != nil {
		t.Errorf("a declaration by a user without the token, bound to a Lease that does not exist, locks the holder out of its FencedResource orders: Writer.Set %v; delete %v (I2)", round7Short(err), round7Short(delErr))
	}
}

// TestRound7RaiseThroughThePreferredVersionPrunes: "nothing is lost" and I2 (fence-on-acquire's raise must
// not change content), no attacker needed beyond an acquisition. FenceObjectsOnAcquire resolves a declared
// resource with the RESTMapper's preferred version and raises each object with a merge patch there. For
// the gizmos of TestRound7OtherVersionPrunesTheHoldersField the preferred version is v2, whose schema lacks
// spec.color. The holder writes a Gizmo through v1 with both fields; the next acquisition (another replica,
// fence-on-acquire for objects) raises it. The holder's spec.color must survive the raise.
// Observed (8ddf943): WORKED. Epoch record 1 -> 2 and spec through v1 from map[color:red size:3] to
// map[size:3].
func TestRound7RaiseThroughThePreferredVersionPrunes(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	gizmo := round7Gizmos(t, ns)
	r1, r2 := objectReplicas(t, ns)
	env.Grant(t, ns, "gizmos", []rbacv1.PolicyRule{{APIGroups: []string{round7GizmoGroup}, Resources: []string{"gizmos"}, Verbs: []string{"*"}}}, r1.User)
	grantObjects(t, ns, r1.User)
	grantPolicies(t, ns, r1.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Group: round7GizmoGroup, Resource: "gizmos"})
	t1 := acquireAndFence(t, r1, ns, appLease, 1)
	g := gizmo("v1")
	g.Object["spec"] = map[string]any{"size": int64(3), "color": "red"}
	if err := retryRBAC(t, "the holder's gizmo", func() error { return fencing.NewClient(r1.Client, tokenOf(t1)).Create(ctx, g) }); err != nil {
		t.Fatal(err)
	}
	read := func() (map[string]any, string) {
		u := gizmo("v1")
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			t.Fatal(err)
		}
		spec, _ := u.Object["spec"].(map[string]any)
		return spec, u.GetAnnotations()[fencingv1alpha1.ObjectEpochAnnotation]
	}
	before, e := read()
	t.Logf("the holder's gizmo through v1 at epoch %s: spec %v", e, before)
	acquireAndFence(t, r2, ns, appLease, 2)
	after, e := read()
	t.Logf("after replica-2's acquisition and raise: epoch record %s, spec through v1 %v", e, after)
	if after["color"] != "red" {
		t.Errorf("fence-on-acquire's raise lost the holder's spec.color (spec now %v, was %v): it patched the Gizmo through its preferred version v2, whose schema prunes it (nothing lost)", after, before)
	}
}

// round7GizmoGroup serves gizmos at v1 (storage; spec.size and spec.color) and v2 (spec.size only), with
// the conversion strategy None.
const round7GizmoGroup = "round7.test.fencekit.io"

// round7Gizmos installs the Gizmo CRD (once), waits until both versions are served, and returns a
// constructor of Gizmo ns/g at a version.
func round7Gizmos(t *testing.T, ns string) func(version string) *unstructured.Unstructured {
	t.Helper()
	ctx := t.Context()
	const group = round7GizmoGroup
	schema := func(props map[string]any) map[string]any {
		return map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
			"spec": map[string]any{"type": "object", "properties": props}}}}
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gizmos." + group},
		"spec": map[string]any{"group": group, "scope": "Namespaced",
			"names": map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
			"versions": []any{
				map[string]any{"name": "v1", "served": true, "storage": true, "schema": schema(map[string]any{
					"size": map[string]any{"type": "integer"}, "color": map[string]any{"type": "string"}})},
				map[string]any{"name": "v2", "served": true, "storage": false, "schema": schema(map[string]any{
					"size": map[string]any{"type": "integer"}})},
			}},
	}}
	if err := env.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gizmo := func(version string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(group + "/" + version)
		u.SetKind("Gizmo")
		u.SetNamespace(ns)
		u.SetName("g")
		return u
	}
	for _, v := range []string{"v1", "v2"} {
		testenv.Eventually(t, "the Gizmo CRD is served at "+v, func() (bool, string) {
			err := env.Client.List(ctx, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": group + "/" + v, "kind": "GizmoList"}}, client.InNamespace(ns))
			return err == nil, testenv.ErrString(err)
		})
	}
	return gizmo
}
