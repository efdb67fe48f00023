package operator_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
)

// The attacks on what a write may change without the token (internal/admission's allowlist), on the real
// apiserver. Each subtest says which way around the promise it tries; each was admitted before the
// allowlist (deny by default, free by proof) and is refused now, while the holder's own writes, and the
// free writes the cluster needs, still go through.

// readConfigMap reads ConfigMap ns/name as an admin.
func readConfigMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	return readObject[corev1.ConfigMap](t, ns, name)
}

// TestManagedFieldsAreNotFree: a user with RBAC on ConfigMaps only sends a write that changes nothing but
// managedFields, so that the holder's Apply entry becomes the only owner of a field the holder's merge
// patch set. The holder's next server-side apply, which leaves that field out, would then prune it: data
// lost by a write admitted without a token. Refused now, and the field survives the holder's apply.
func TestManagedFieldsAreNotFree(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	hc := fencing.NewClient(holder.Client, tokenOf(tok))
	apply := func(data map[string]string) error {
		return hc.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(data))
	}
	if err := apply(map[string]string{"a": "1"}); err != nil {
		t.Fatalf("the holder's apply: %v", err)
	}
	if err := patchConfigMap(t, hc, ns, "app", `{"data":{"b":"2"}}`); err != nil {
		t.Fatalf("the holder's merge patch: %v", err)
	}

	// The intruder moves data.b from the holder's Update entry into its Apply entry.
	cm := readConfigMap(t, ns, "app")
	var managed []map[string]any
	raw, err := json.Marshal(cm.ManagedFields)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &managed); err != nil {
		t.Fatal(err)
	}
	moved := false
	for _, e := range managed {
		fields, _ := e["fieldsV1"].(map[string]any)
		data, _ := fields["f:data"].(map[string]any)
		switch e["operation"] {
		case "Apply":
			if data != nil {
				data["f:b"] = map[string]any{}
				moved = true
			}
		case "Update":
			if data != nil {
				delete(data, "f:b")
			}
		}
	}
	if !moved {
		t.Fatalf("no Apply entry owns data in %s", raw)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"managedFields": managed}})
	if err != nil {
		t.Fatal(err)
	}
	editor := userClient(t, "editor")
	mustContain(t, "a tokenless write that moves ownership of data.b", patchConfigMap(t, editor, ns, "app", string(patch)),
		fencing.IsTokenMissing, "ConfigMap "+ns+"/app: this write changes metadata.managedFields", "data.b")

	// Ownership of a finalizer the write adds is its own business: free.
	if err := patchConfigMap(t, editor, ns, "app", `{"metadata":{"finalizers":["example.com/keep"]}}`); err != nil {
		t.Errorf("a tokenless finalizer (free) was refused: %v", err)
	}
	if err := patchConfigMap(t, editor, ns, "app", `{"metadata":{"finalizers":null}}`); err != nil {
		t.Errorf("removing it again was refused: %v", err)
	}

	if err := apply(map[string]string{"a": "1"}); err != nil {
		t.Fatalf("the holder's second apply: %v", err)
	}
	if got := readConfigMap(t, ns, "app").Data; got["b"] != "2" {
		t.Errorf("data after the holder's apply = %v, want b kept (it is owned by the holder's merge patch)", got)
	}
}

// TestSeededEpochRecord: before any FencingPolicy covers a ConfigMap (the normal install order), anyone
// with write RBAC sets its epoch record to 2^53-1. Once the policy covers it, the record must not lock the
// holder out: fence-on-acquire replaces it (the Lease never issued it) and the holder's writes go through.
func TestSeededEpochRecord(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.Fences = elector.Fences{Objects: true}
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := userClient(t, "editor")
	for name, record := range map[string]string{"above": strconv.FormatInt(elector.MaxEpoch, 10), "next": "2"} {
		seeded := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{fencingv1alpha1.ObjectEpochAnnotation: record}}, Data: map[string]string{"v": "seeded"}}
		if err := editor.Create(ctx, seeded); err != nil {
			t.Fatal(err)
		}
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	holder.Acquire(t, ns, appLease, 1)
	tok := holder.Acquire(t, ns, appLease, 2)
	if err := fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, tok); err != nil {
		t.Fatalf("fence-on-acquire at epoch 2 over the seeded records: %v", err)
	}
	hc := fencing.NewClient(holder.Client, tokenOf(tok))
	for _, name := range []string{"above", "next"} {
		if got := objectEpoch(t, ns, name); got != "2" {
			t.Errorf("ConfigMap %s: record %q after fence-on-acquire at epoch 2, want 2", name, got)
		}
		if err := patchConfigMap(t, hc, ns, name, `{"data":{"v":"holder"}}`); err != nil {
			t.Errorf("ConfigMap %s: the holder's write at epoch 2: %v", name, err)
		}
	}
}

// TestFreeWritesAreBounded: finalizers (on covered objects and on FencedResources) and a FencedResource's
// labels and annotations are free, and bounded, so that a user with patch rights only cannot pad a fenced
// object toward etcd's request limit, where the next holder's fence-on-acquire and its writes fail.
func TestFreeWritesAreBounded(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.Fences = elector.Fences{Objects: true, FencedResources: true}
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	env.Grant(t, ns, "fr-editor", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedresources"},
		Verbs: []string{"get", "patch", "update"}}}, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	key := declare(t, ns, "orders", appLease)
	tok := holder.Acquire(t, ns, appLease, 1)
	if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	editor := userClient(t, "editor")
	finalizers := func(n int) string {
		f := make([]string, n)
		for i := range f {
			f[i] = fmt.Sprintf("example.com/f%d", i)
		}
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": f}})
		return string(b)
	}
	if err := patchConfigMap(t, editor, ns, "app", finalizers(admission.MaxFreeFinalizers)); err != nil {
		t.Errorf("%d finalizers without a token (the bound): %v", admission.MaxFreeFinalizers, err)
	}
	for _, n := range []int{admission.MaxFreeFinalizers + 1, 6000} {
		mustContain(t, fmt.Sprintf("%d finalizers on a ConfigMap without a token", n), patchConfigMap(t, editor, ns, "app", finalizers(n)),
			func(err error) bool { return fencing.ReasonOf(err) == fencing.ReasonInvalid },
			"ConfigMap "+ns+"/app: this write without a fencing token adds finalizers", fmt.Sprintf("leaving %d on the object, over the bound of %d", n, admission.MaxFreeFinalizers))
		mustContain(t, fmt.Sprintf("%d finalizers on a FencedResource without a token", n), mergePatch(t, editor, key, finalizers(n)),
			func(err error) bool { return fencing.ReasonOf(err) == fencing.ReasonInvalid }, "FencedResource "+ns+"/orders", "over the bound of 16")
	}
	pad := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/pad":%q}}}`, strings.Repeat("x", admission.MaxFreeMetadataBytes))
	mustContain(t, "64 KiB of annotations on a FencedResource without a token", mergePatch(t, editor, key, pad),
		func(err error) bool { return fencing.ReasonOf(err) == fencing.ReasonInvalid }, "FencedResource "+ns+"/orders", "over the bound of 65536 bytes")
	if err := mergePatch(t, editor, key, `{"metadata":{"labels":{"team":"orders"},"annotations":{"example.com/note":"x"}}}`); err != nil {
		t.Errorf("a label and an annotation on a FencedResource without a token (free): %v", err)
	}

	// The next holder fences and writes both as if nothing had happened.
	tok2 := holder.Acquire(t, ns, appLease, 2)
	if err := fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, tok2); err != nil {
		t.Errorf("fence-on-acquire of the ConfigMap: %v", err)
	}
	if err := fencing.FenceOnAcquire(holder.Client).Raise(ctx, tok2); err != nil {
		t.Errorf("fence-on-acquire of the FencedResource: %v", err)
	}
	if err := patchConfigMap(t, fencing.NewClient(holder.Client, tokenOf(tok2)), ns, "app", `{"data":{"v":"2"}}`); err != nil {
		t.Errorf("the holder's ConfigMap write at epoch 2: %v", err)
	}
	if _, err := fencing.NewWriter(holder.Client).Set(ctx, tok2, key, map[string]any{"v": 2}); err != nil {
		t.Errorf("the holder's FencedResource write at epoch 2: %v", err)
	}
}

// TestDeletionMarkerAuthorisesOneDelete: the holder wrote the deletion marker (as NewClient's Delete does
// first), its DELETE did not happen, and it kept writing. A stale replica of the same user, whose DELETE
// carries no token, must not be able to delete the object for the rest of the epoch: a delete names the
// marker write's resourceVersion as its precondition, which a bare DELETE does not.
func TestDeletionMarkerAuthorisesOneDelete(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	r1, _ := replicas(t, ns)
	grantObjects(t, ns, r1.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := r1.Acquire(t, ns, appLease, 1)
	hc := fencing.NewClient(r1.Client, tokenOf(tok))
	if err := hc.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"v": "1"}}); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1",%q:"1"}}}`, fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.ObjectEpochAnnotation)
	if err := r1.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
		client.RawPatch(types.MergePatchType, []byte(marker)), client.FieldOwner(tok.FieldManager())); err != nil {
		t.Fatalf("the holder's marker write: %v", err)
	}
	// The holder keeps writing, by hand, leaving the marker in place: a bare DELETE of the same user (a
	// stale replica's, kubectl's) names no resourceVersion, so the marker alone does not let it through.
	if err := r1.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
		client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"2"}}`)), client.FieldOwner(tok.FieldManager())); err != nil {
		t.Fatalf("the holder's raw write that keeps the marker: %v", err)
	}
	bare := func() error {
		return r1.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
	}
	mustContain(t, "a bare DELETE of the holder's user after the holder wrote past its marker", bare(),
		fencing.IsTokenMissing, "ConfigMap "+ns+"/app is fenced by lease "+appLease, "must name the resourceVersion", "this one names none")
	// NewClient's writes remove it.
	if err := patchConfigMap(t, hc, ns, "app", `{"data":{"v":"3"}}`); err != nil {
		t.Fatalf("the holder's NewClient write after its marker: %v", err)
	}
	if m, set := readConfigMap(t, ns, "app").Annotations[fencingv1alpha1.DeleteAtEpochAnnotation]; set {
		t.Errorf("the marker %q is still set after the holder's NewClient write", m)
	}
	mustContain(t, "a bare DELETE after the marker is gone", bare(), fencing.IsTokenMissing, "ConfigMap "+ns+"/app is fenced by lease "+appLease)
	if got := readConfigMap(t, ns, "app").Data["v"]; got != "3" {
		t.Errorf("the ConfigMap holds %q, want the holder's 3", got)
	}
	if err := hc.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}); err != nil {
		t.Errorf("the holder's own NewClient delete: %v", err)
	}
}

// TestClusterControllersWriteStatusOnly: the kube-system status exemption admits a status write of a
// covered object, and the Deployment controller's revision annotation written through deployments/status
// (Kubernetes 1.37); not another change of the object's metadata through status.
func TestClusterControllersWriteStatusOnly(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	const rsController = "system:serviceaccount:kube-system:replicaset-controller"
	grantObjects(t, ns, holder.User, admission.DeploymentControllerUser, rsController)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	dep := deployment(ns, "app")
	if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	read := func() *appsv1.Deployment { return readObject[appsv1.Deployment](t, ns, dep.Name) }
	for _, user := range []string{admission.DeploymentControllerUser, rsController} {
		c := userClient(t, user)
		d := read()
		d.Status.ObservedGeneration = d.Generation
		if err := c.Status().Update(ctx, d); err != nil {
			t.Errorf("%s's status write: %v", user, err)
		}
		d = read()
		d.Annotations["example.com/owner"] = "someone-else"
		mustContain(t, user+"'s annotation through status", c.Status().Update(ctx, d), fencing.IsTokenMissing,
			"Deployment "+ns+"/app: this write changes metadata.annotations[example.com/owner]")
	}
	d := read()
	d.Annotations["deployment.kubernetes.io/revision"] = "2"
	if err := userClient(t, admission.DeploymentControllerUser).Status().Update(ctx, d); err != nil {
		t.Errorf("the Deployment controller's revision annotation through status: %v", err)
	}
	d = read()
	d.Annotations["deployment.kubernetes.io/revision"] = "3"
	mustContain(t, "another kube-system controller's revision annotation", userClient(t, rsController).Status().Update(ctx, d),
		fencing.IsTokenMissing, "deployment.kubernetes.io/revision")
	if got := read().Annotations["example.com/owner"]; got != "" {
		t.Errorf("the Deployment carries example.com/owner=%q written through status", got)
	}
}

// TestDeleteCollectionNamesTheObject: a deletecollection is admitted object by object; a refusal names
// the object, not "ns/".
func TestDeleteCollectionNamesTheObject(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	err := userClient(t, "editor").DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))
	mustContain(t, "a deletecollection of fenced ConfigMaps", err, fencing.IsNotHolder, "ConfigMap "+ns+"/app is fenced by lease "+appLease)
	if err != nil && strings.Contains(err.Error(), "ConfigMap "+ns+"/ ") {
		t.Errorf("the refusal names the object as %q: %v", ns+"/", err)
	}
}
