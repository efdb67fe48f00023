package admission_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// What a write of a covered object may change without the token, on the real apiserver: internal/operator/admission's
// allowlist (deny by default, free by proof) and the exemptions of the cluster's own controllers. Each test
// tries one way around the promise, refused, while the holder's own writes, and the free writes the cluster
// needs, still go through.

// readConfigMap reads ConfigMap ns/name as an admin.
func readConfigMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	return testenv.Read[corev1.ConfigMap](t, env.Client, ns, name)
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
	editor := env.ClientAs(t, "editor")
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

// seedThenCover has user editor create ConfigMaps of ns, each carrying annotation key at the value values
// gives for its name, while no FencingPolicy covers them (users may write ConfigMaps too, grantObjects);
// then it declares FencingPolicy app covering the ConfigMaps of ns.
func seedThenCover(t *testing.T, ns, key string, values map[string]string, users ...string) {
	t.Helper()
	grantObjects(t, ns, append([]string{"editor"}, users...)...)
	editor := env.ClientAs(t, "editor")
	for name, v := range values {
		seeded := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{key: v}},
			Data: map[string]string{"v": "seeded"}}
		testenv.Eventually(t, "the editor seeds ConfigMap "+name, func() (bool, string) {
			err := editor.Create(t.Context(), seeded.DeepCopy())
			return err == nil, testenv.ErrString(err)
		})
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
}

// TestSeededRecords: before any FencingPolicy covers a ConfigMap (the normal install order), anyone with
// write RBAC sets its epoch record or its deletion marker. Once the policy covers it, neither locks the
// holder out or lets anyone else through.
func TestSeededRecords(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()

	// An epoch record of 2^53-1, or at the next epoch: fence-on-acquire replaces it (the Lease never issued
	// it) and the holder's writes go through.
	t.Run("a seeded epoch record above every epoch, or at the next", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := fencingHolder(t, ns, protocol.Fences{Objects: true})
		seedThenCover(t, ns, fencingv1alpha1.ObjectEpochAnnotation, map[string]string{"above": strconv.FormatInt(protocol.MaxEpoch, 10), "next": "2"}, holder.User)
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
	})

	// A deletion marker seeded at the Lease's next epoch does not make that acquisition's raise fail: the
	// raise removes any marker.
	t.Run("a seeded deletion marker at the next epoch", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := fencingHolder(t, ns, protocol.Fences{Objects: true})
		seedThenCover(t, ns, fencingv1alpha1.DeleteAtEpochAnnotation, map[string]string{"seeded": "2"}, holder.User)
		t1 := holder.Acquire(t, ns, appLease, 1)
		if err := fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, t1); err != nil {
			t.Fatal(err)
		}
		t2 := holder.Acquire(t, ns, appLease, 2)
		if err := fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, t2); err != nil {
			t.Errorf("fence-on-acquire at epoch 2 over a marker seeded before coverage: %v", err)
		}
	})

	// A deletion marker seeded at the Lease's current epoch neither lets a stale replica's bare DELETE
	// through nor makes the holder's server-side apply fail. A delete under a live Lease also carries the
	// stored resourceVersion as its precondition (pkg/fencing's clients send the marker write's), which no
	// bare DELETE does; a write may keep a marker.
	t.Run("a seeded deletion marker at the current epoch", func(t *testing.T) {
		ns := env.Namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Acquire(t, ns, appLease, 1)
		t2 := r2.Acquire(t, ns, appLease, 2)
		seedThenCover(t, ns, fencingv1alpha1.DeleteAtEpochAnnotation, map[string]string{"del": "2", "apply": "2"}, r1.User)
		mustContain(t, "a stale replica's bare DELETE on a seeded marker",
			r1.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "del"}}), nil, "ConfigMap "+ns+"/del")
		hc := fencing.NewClient(r2.Client, tokenOf(t2))
		if err := hc.Apply(ctx, corev1ac.ConfigMap("apply", ns).WithData(map[string]string{"v": "holder"})); err != nil {
			t.Errorf("the holder's server-side apply over a seeded marker: %v", err)
		}
	})
}

// TestFreeWritesAreBounded: finalizers (on covered objects and on FencedResources), a FencedResource's
// labels and annotations, and the managedFields entries of their tokenless managers are free, and bounded,
// so that a user with patch rights only cannot pad a fenced object toward etcd's request limit, where the
// next holder's fence-on-acquire and its writes fail.
func TestFreeWritesAreBounded(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()

	t.Run("finalizers, labels and annotations", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := fencingHolder(t, ns, protocol.Fences{Objects: true, FencedResources: true})
		grantObjects(t, ns, holder.User, "editor")
		env.Grant(t, ns, "fr-editor", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedresources"},
			Verbs: []string{"get", "patch", "update"}}}, "editor")
		declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
		key := declare(t, ns, "orders", appLease)
		tok := holder.Acquire(t, ns, appLease, 1)
		if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}); err != nil {
			t.Fatal(err)
		}
		editor := env.ClientAs(t, "editor")
		finalizers := func(n int) string {
			f := make([]string, n)
			for i := range f {
				f[i] = fmt.Sprintf("example.com/f%d", i)
			}
			b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": f}})
			return string(b)
		}
		if err := patchConfigMap(t, editor, ns, "app", finalizers(16)); err != nil {
			t.Errorf("16 finalizers without a token: %v", err)
		}
		// Finalizers of the longest names (253 + 1 + 63 bytes), enough to pass the bound on their own.
		many := admission.MaxFreeObjectBytes/300 + 1
		long := func(n int) string {
			f := make([]string, n)
			for i := range f {
				f[i] = fmt.Sprintf("%s/%063d", strings.Repeat(strings.Repeat("p", 62)+".", 4)+"x", i)
			}
			b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": f}})
			return string(b)
		}
		mustContain(t, fmt.Sprintf("%d long finalizers on a ConfigMap without a token", many), patchConfigMap(t, editor, ns, "app", long(many)),
			func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonInvalid },
			"ConfigMap "+ns+"/app: this write without a fencing token grows the object from", fmt.Sprintf("over the bound of %d bytes", admission.MaxFreeObjectBytes))
		mustContain(t, fmt.Sprintf("%d long finalizers on a FencedResource without a token", many), mergePatch(t, editor, key, long(many)),
			func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonInvalid }, "FencedResource "+ns+"/orders", fmt.Sprintf("over the bound of %d bytes", admission.MaxFreeObjectBytes))
		pad := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/pad":%q}}}`, strings.Repeat("x", 40*1024))
		if err := mergePatch(t, editor, key, pad); err != nil {
			t.Errorf("40 KiB of annotations on a FencedResource without a token (within the bounds): %v", err)
		}
		// Metadata and status grow without a token only within MaxFreePartBytes (I3: the raise of the
		// holder's objects costs in proportion to their size).
		mustContain(t, "200 KiB more annotations on a FencedResource without a token", mergePatch(t, editor, key,
			fmt.Sprintf(`{"metadata":{"annotations":{"example.com/pad2":%q}}}`, strings.Repeat("x", 200*1024))),
			func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonInvalid },
			"FencedResource "+ns+"/orders: this write without a fencing token grows its labels, annotations", fmt.Sprintf("over the bound of %d bytes", admission.MaxFreePartBytes))
		mustContain(t, "padding a FencedResource's labels past the bound without a token", mergePatch(t, editor, key,
			fmt.Sprintf(`{"metadata":{"labels":{%s}}}`, labelPad(0, 64*1024))),
			func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonInvalid }, fmt.Sprintf("over the bound of %d bytes", admission.MaxFreePartBytes))
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
	})

	// 16 tokenless appliers co-owning the same 64 KiB of a FencedResource's annotations would put 1 MB
	// of managedFields on it, and the holder's apply of data within MaxDataBytes would then fail
	// ("etcdserver: request is too large"). The object is bounded, managedFields included.
	t.Run("free managers co-own the free metadata", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := newWorker(t, ns, "app-operator")
		grantFencedResources(t, ns, "editor")
		editor := env.ClientAs(t, "editor")
		padded, control := declare(t, ns, "padded", "l"), declare(t, ns, "control", "l")
		prefix := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60)
		ann := map[string]string{}
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s/k%04d%s", prefix, i, strings.Repeat("x", 50))
			ann[k] = ""
			if b, _ := json.Marshal(ann); len(b) > 62*1024 {
				delete(ann, k)
				break
			}
		}
		body, _ := json.Marshal(map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
			"metadata": map[string]any{"name": padded.Name, "namespace": ns, "annotations": ann}})
		for i := range 16 {
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
}

// labelPad is about n bytes of labels (JSON members) of the longest keys and values the apiserver
// accepts, their keys distinct for each i.
func labelPad(i, n int) string {
	var b strings.Builder
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4) + "x"
	for j := 0; b.Len() < n; j++ {
		if j > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%q:%q", fmt.Sprintf("%s/%02d%061d", prefix, i, j), strings.Repeat("v", 63))
	}
	return b.String()
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

// deploymentHolder is the holder of the Deployment tests: worker app-operator, allowed with users to write
// ConfigMaps and Deployments in dep's namespace (grantObjects), holding Lease appLease at epoch 1 under
// FencingPolicy app, which fences the namespace's Deployments and its ConfigMaps labelled app=fenced. It
// creates dep with its token and returns its fenced client and a reader of dep as stored.
func deploymentHolder(t *testing.T, dep *appsv1.Deployment, users ...string) (client.Client, func() *appsv1.Deployment) {
	t.Helper()
	ns := dep.Namespace
	holder := newWorker(t, ns, "app-operator")
	// It never renews: a Lease of 15 s would expire under a slow test, and with it every hold (held only
	// while the Lease is live).
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, append([]string{holder.User}, users...)...)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	hc := fencing.NewClient(holder.Client, tokenOf(holder.Acquire(t, ns, appLease, 1)))
	testenv.Eventually(t, "the holder (RBAC granted) creates Deployment "+dep.Name, func() (bool, string) {
		err := hc.Create(t.Context(), dep)
		return err == nil, testenv.ErrString(err)
	})
	return hc, func() *appsv1.Deployment { return testenv.Read[appsv1.Deployment](t, env.Client, ns, dep.Name) }
}

// TestFencingPolicyOtherWriters: the objects' other legitimate writers. kube-controller-manager's
// Deployment status and the garbage collector's orphaning stay free; the same users changing the spec, the
// epoch record or adding an owner are refused; finalizers are free; a label change that would take an
// object out of a selector needs the token; an undeclared namespace is not affected at all.
func TestFencingPolicyOtherWriters(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const controller = "system:serviceaccount:kube-system:deployment-controller"
	dep := testenv.Deployment(ns, "app")
	dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "00000000-0000-0000-0000-000000000001"}}
	hc, read := deploymentHolder(t, dep, controller, admission.GarbageCollectorUser, "jane")
	kcm := env.ClientAs(t, controller)
	gc := env.ClientAs(t, admission.GarbageCollectorUser)
	jane := env.ClientAs(t, "jane")
	d := read()
	d.Status.ObservedGeneration, d.Status.Replicas = 1, 1
	if err := kcm.Status().Update(ctx, d); err != nil {
		t.Errorf("kube-controller-manager's Deployment status update was refused: %v", err)
	}
	d = read()
	d.Annotations[fencingv1alpha1.ObjectEpochAnnotation] = "9"
	d.Status.Replicas = 2
	mustContain(t, "kube-controller-manager's status write that changes the epoch record", kcm.Status().Update(ctx, d),
		fencing.IsTokenMissing, "Deployment "+ns+"/app: this write changes")
	d = read()
	d.Spec.Replicas = ptr.To(int32(3))
	mustContain(t, "kube-controller-manager's spec write", kcm.Update(ctx, d), fencing.IsTokenMissing, "changes spec.replicas but presents no fencing token")
	d = read()
	d.Finalizers = append(d.Finalizers, "example.com/keep")
	if err := jane.Update(ctx, d); err != nil {
		t.Errorf("a user adding a finalizer was refused: %v", err)
	}
	d = read()
	d.OwnerReferences = append(d.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "ghost", UID: "00000000-0000-0000-0000-000000000002"})
	mustContain(t, "the garbage collector adding an owner", gc.Update(ctx, d), fencing.IsTokenMissing, "metadata.ownerReferences")
	d = read()
	d.OwnerReferences = nil
	if err := gc.Update(ctx, d); err != nil {
		t.Errorf("the garbage collector orphaning the Deployment was refused: %v", err)
	}

	// The selector: a labelled ConfigMap is fenced, and removing its label (to escape) needs the token.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "labelled", Labels: map[string]string{"app": "fenced"}}}
	if err := hc.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	escape := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"app":null}}}`))
	mustContain(t, "a user removing the label the selector matches", jane.Patch(ctx, cm.DeepCopy(), escape),
		fencing.IsTokenMissing, "ConfigMap "+ns+"/labelled: this write changes metadata.labels")
	free := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unlabelled"}, Data: map[string]string{"a": "b"}}
	if err := jane.Create(ctx, free); err != nil {
		t.Errorf("a ConfigMap outside the selector was refused: %v", err)
	}
	free.Labels = map[string]string{"app": "fenced"}
	mustContain(t, "a user labelling a ConfigMap into the selector", jane.Update(ctx, free), fencing.IsTokenMissing, "metadata.labels")

	// An undeclared namespace is unaffected.
	other := env.Namespace(t)
	grantObjects(t, other, "jane")
	testenv.Eventually(t, "jane writes a ConfigMap in an undeclared namespace", func() (bool, string) {
		err := jane.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "free", Labels: map[string]string{"app": "fenced"}}})
		return err == nil, testenv.ErrString(err)
	})
}

// TestClusterControllersWriteStatusOnly: the kube-system status exemption admits a status write of a
// covered object, and the Deployment controller's revision annotation written through deployments/status
// (Kubernetes 1.37); not another change of the object's metadata through status.
func TestClusterControllersWriteStatusOnly(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const rsController = "system:serviceaccount:kube-system:replicaset-controller"
	_, read := deploymentHolder(t, testenv.Deployment(ns, "app"), admission.DeploymentControllerUser, rsController)
	for _, user := range []string{admission.DeploymentControllerUser, rsController} {
		c := env.ClientAs(t, user)
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
	if err := env.ClientAs(t, admission.DeploymentControllerUser).Status().Update(ctx, d); err != nil {
		t.Errorf("the Deployment controller's revision annotation through status: %v", err)
	}
	d = read()
	d.Annotations["deployment.kubernetes.io/revision"] = "3"
	mustContain(t, "another kube-system controller's revision annotation", env.ClientAs(t, rsController).Status().Update(ctx, d),
		fencing.IsTokenMissing, "deployment.kubernetes.io/revision")
	if got := read().Annotations["example.com/owner"]; got != "" {
		t.Errorf("the Deployment carries example.com/owner=%q written through status", got)
	}
}

// TestGarbageCollectorUserOnObjects: the garbage collector's exemptions are for removing owners and
// deleting: its user cannot add an owner to a covered ConfigMap (an owner deletes) or change its data, and
// the namespace controller's cannot delete it in a live namespace.
func TestGarbageCollectorUserOnObjects(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, admission.GarbageCollectorUser, admission.NamespaceControllerUser)
	if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Data: map[string]string{"v": "holder"}}); err != nil {
		t.Fatal(err)
	}
	gc := env.ClientAs(t, admission.GarbageCollectorUser)
	owner := `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"00000000-0000-0000-0000-000000000001"}]}}`
	err := retryRBAC(t, "the GC's write", func() error { return patchConfigMap(t, gc, ns, "app", owner) })
	mustContain(t, "the GC's user adds an owner", err, fencing.IsTokenMissing, "ConfigMap "+ns+"/app", "metadata.ownerReferences")
	mustContain(t, "the GC's user changes data", patchConfigMap(t, gc, ns, "app", `{"data":{"v":"gc"}}`), fencing.IsTokenMissing, "data.v")
	mustContain(t, "the namespace controller deletes in a live namespace",
		env.ClientAs(t, admission.NamespaceControllerUser).Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}),
		fencing.IsNotHolder, "ConfigMap "+ns+"/app is fenced by lease "+appLease)
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
	err := env.ClientAs(t, "editor").DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns))
	mustContain(t, "a deletecollection of fenced ConfigMaps", err, fencing.IsNotHolder, "ConfigMap "+ns+"/app is fenced by lease "+appLease)
	if err != nil && strings.Contains(err.Error(), "ConfigMap "+ns+"/ ") {
		t.Errorf("the refusal names the object as %q: %v", ns+"/", err)
	}
}

// grantRuleObjects lets users write the resources these attacks use, so that refusals are fencekit's.
func grantRuleObjects(t *testing.T, ns string, users ...string) {
	env.Grant(t, ns, "rule-objects", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "persistentvolumeclaims"}, Verbs: []string{"*"}},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "jobs/status"}, Verbs: []string{"*"}},
	}, users...)
}

// rulePolicy declares ConfigMaps, Secrets, PVCs and Jobs of ns fenced by appLease.
func rulePolicy(t *testing.T, ns string) {
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"},
		fencingv1alpha1.FencedObjects{Resource: "secrets"}, fencingv1alpha1.FencedObjects{Resource: "persistentvolumeclaims"},
		fencingv1alpha1.FencedObjects{Group: "batch", Resource: "jobs"})
}

func claim(ns, name string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("manual"),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
}

// ruleHolder is the holder of the rule attacks: worker app-operator, allowed with users to write what
// rulePolicy fences in ns (grantRuleObjects), holding Lease appLease at epoch 1. It returns its fenced client.
func ruleHolder(t *testing.T, ns string, users ...string) client.Client {
	t.Helper()
	holder := newWorker(t, ns, "app-operator")
	grantRuleObjects(t, ns, append([]string{holder.User}, users...)...)
	grantPolicies(t, ns, holder.User)
	rulePolicy(t, ns)
	return fencing.NewClient(holder.Client, tokenOf(holder.Acquire(t, ns, appLease, 1)))
}

// patchDecided merge-patches obj as c once RBAC lets c patch it (see retryRBAC), and returns the decision.
func patchDecided(t *testing.T, what string, c client.Client, obj client.Object, patch string) error {
	t.Helper()
	return retryRBAC(t, what, func() error { return c.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))) })
}

// TestRuleChangeAttacks: the per-resource controller exemptions (the volume binder's, the token
// controller's, the TTL controller's), the delete precondition and the kube-root-ca.crt exclusion stay
// as narrow as they are written. Each subtest says what it tries and which check stops it.
func TestRuleChangeAttacks(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()

	// A create of a covered claim by the volume binder (or kube-controller-manager's one credential, as
	// the StatefulSet controller creates claims) has no stored object for the binder's rule to read: it is
	// refused, not a webhook panic (a 500).
	t.Run("the binder's or kube-controller-manager's create of a covered claim is refused, not a 500", func(t *testing.T) {
		ns := env.Namespace(t)
		const kcm = admission.ControllerManagerUser
		grantRuleObjects(t, ns, kcm, admission.VolumeBinderUser)
		rulePolicy(t, ns)
		for _, u := range []string{kcm, admission.VolumeBinderUser} {
			c := claim(ns, "created")
			c.Spec.VolumeName = "pv-c"
			mustContain(t, u+" creates a covered claim",
				retryRBAC(t, "a claim create", func() error { return env.ClientAs(t, u).Create(ctx, c) }), fencing.IsTokenMissing)
		}
	})

	// The token controller's exemption must not take every kubernetes.io/service-account.* annotation:
	// the ServiceAccount's name is the holder's choice.
	t.Run("the token controller cannot rename a token Secret's ServiceAccount", func(t *testing.T) {
		ns := env.Namespace(t)
		hc := ruleHolder(t, ns, admission.TokenControllerUser)
		sa := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-token",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
		if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, sa) }); err != nil {
			t.Fatal(err)
		}
		tc := env.ClientAs(t, admission.TokenControllerUser)
		for _, p := range []string{`{"metadata":{"annotations":{"` + corev1.ServiceAccountNameKey + `":"other"}}}`,
			`{"metadata":{"annotations":{"kubernetes.io/service-account.anything":"x"}}}`} {
			mustContain(t, "the token controller writes "+p,
				patchDecided(t, "a secret patch", tc, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-token"}}, p), fencing.IsTokenMissing)
		}
	})

	// RESIDUAL (documented in docs/design/residuals.md): while the holder's marker at the
	// current epoch is in place (its DELETE never went out), a stale replica of the same user that deletes
	// naming the resourceVersion it read itself is admitted: admission cannot tell that precondition from
	// the holder's. It deletes only an object the current holder had marked for deletion; the next raise
	// clears the marker. This subtest asserts it as it stands.
	t.Run("a stale replica deletes with the resourceVersion it has cached, residual", func(t *testing.T) {
		ns := env.Namespace(t)
		r1, r2 := replicas(t, ns)
		grantRuleObjects(t, ns, r1.User)
		grantPolicies(t, ns, r1.User)
		rulePolicy(t, ns)
		r1.Acquire(t, ns, appLease, 1)
		t2 := r2.Acquire(t, ns, appLease, 2)
		c2 := fencing.NewClient(r2.Client, tokenOf(t2))
		if err := retryRBAC(t, "create", func() error {
			return c2.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}, Data: map[string]string{"v": "2"}})
		}); err != nil {
			t.Fatal(err)
		}
		p := `{"metadata":{"annotations":{"` + fencingv1alpha1.DeleteAtEpochAnnotation + `":"2"}}}`
		if err := r2.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}},
			client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(protocol.FieldManagerFor(2))); err != nil {
			t.Fatal(err)
		}
		var seen corev1.ConfigMap
		if err := r1.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "x"}, &seen); err != nil {
			t.Fatal(err)
		}
		rv := seen.ResourceVersion
		if err := r1.Client.Delete(ctx, &seen, client.Preconditions{ResourceVersion: &rv}); err != nil {
			t.Fatalf("the residual no longer holds (refused: %v): update docs/design/residuals.md and this test", err)
		}
	})

	// The volume binder's exemption: spec.volumeName on an unbound claim and the binding annotations only.
	t.Run("the volume binder's exemption stays a binding", func(t *testing.T) {
		ns := env.Namespace(t)
		const kcm = admission.ControllerManagerUser
		hc := ruleHolder(t, ns, "editor", admission.VolumeBinderUser, kcm, admission.ReplicaSetCtrlUser)
		for _, n := range []string{"data", "bound"} {
			if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, claim(ns, n)) }); err != nil {
				t.Fatal(err)
			}
		}
		binder, editor, single, rs := env.ClientAs(t, admission.VolumeBinderUser), env.ClientAs(t, "editor"), env.ClientAs(t, kcm),
			env.ClientAs(t, admission.ReplicaSetCtrlUser)
		patch := func(c client.Client, name, p string) error {
			return patchDecided(t, "a claim patch", c, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, p)
		}
		mustContain(t, "an editor binds the holder's claim", patch(editor, "data", `{"spec":{"volumeName":"pv-evil"}}`), fencing.IsTokenMissing)
		mustContain(t, "another kube-system controller binds the holder's claim", patch(rs, "data", `{"spec":{"volumeName":"pv-evil"}}`), fencing.IsTokenMissing)
		mustContain(t, "the binder binds and changes the request", patch(binder, "data",
			`{"spec":{"volumeName":"pv-a","resources":{"requests":{"storage":"2Gi"}}}}`), nil) // the apiserver's own validation, or fencekit
		mustContain(t, "the binder binds and labels", patch(binder, "data",
			`{"metadata":{"labels":{"x":"y"}},"spec":{"volumeName":"pv-a"}}`), fencing.IsTokenMissing)
		mustContain(t, "the binder writes another annotation", patch(binder, "data",
			`{"metadata":{"annotations":{"pv.kubernetes.io/provisioned-by":"evil"}}}`), fencing.IsTokenMissing)
		mustContain(t, "the binder clears the epoch record", patch(binder, "data",
			`{"metadata":{"annotations":{"`+fencingv1alpha1.ObjectEpochAnnotation+`":null}},"spec":{"volumeName":"pv-a"}}`), fencing.IsTokenMissing)
		if err := patch(binder, "bound", `{"metadata":{"annotations":{"pv.kubernetes.io/bind-completed":"yes"}},"spec":{"volumeName":"pv-a"}}`); err != nil {
			t.Fatalf("the binder's binding of an unbound claim: %v", err)
		}
		mustContain(t, "the binder rebinds a bound claim", patch(binder, "bound", `{"spec":{"volumeName":"pv-b"}}`), nil)
		mustContain(t, "kube-controller-manager's one credential rebinds a bound claim", patch(single, "bound", `{"spec":{"volumeName":"pv-b"}}`), nil)
	})

	// The token controller's exemption: token, ca.crt, namespace of a service-account-token Secret.
	t.Run("the token controller's exemption stays the token", func(t *testing.T) {
		ns := env.Namespace(t)
		hc := ruleHolder(t, ns, "editor", admission.TokenControllerUser)
		sa := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-token",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{"extra": []byte("holder")}}
		opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque"}, Data: map[string][]byte{"v": []byte("holder")}}
		for _, s := range []*corev1.Secret{sa, opaque} {
			if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, s.DeepCopy()) }); err != nil {
				t.Fatal(err)
			}
		}
		tc, editor := env.ClientAs(t, admission.TokenControllerUser), env.ClientAs(t, "editor")
		patch := func(c client.Client, name, p string) error {
			return patchDecided(t, "a secret patch", c, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, p)
		}
		mustContain(t, "an editor writes the token", patch(editor, "sa-token", `{"data":{"token":"ZXZpbA=="}}`), fencing.IsTokenMissing)
		mustContain(t, "the token controller writes other data", patch(tc, "sa-token", `{"data":{"extra":"ZXZpbA=="}}`), fencing.IsTokenMissing)
		mustContain(t, "the token controller writes data of an Opaque Secret", patch(tc, "opaque", `{"data":{"token":"ZXZpbA=="}}`), fencing.IsTokenMissing)
		mustContain(t, "the token controller writes the token and a label", patch(tc, "sa-token",
			`{"metadata":{"labels":{"x":"y"}},"data":{"token":"ZXZpbA=="}}`), fencing.IsTokenMissing)
		mustContain(t, "the token controller removes the holder's data", patch(tc, "sa-token", `{"data":{"extra":null,"token":"dA=="}}`), fencing.IsTokenMissing)
		if err := patch(tc, "sa-token", `{"data":{"token":"dA==","ca.crt":"Y2E=","namespace":"bnM="}}`); err != nil {
			t.Errorf("the token controller fills the token: %v", err)
		}
		if got := testenv.Read[corev1.Secret](t, env.Client, ns, "sa-token"); string(got.Data["extra"]) != "holder" {
			t.Errorf("the holder's data in the token Secret is %q", got.Data["extra"])
		}
	})

	// The TTL controller's exemption: only a finished Job with a TTL.
	t.Run("the TTL controller deletes only finished Jobs with a TTL", func(t *testing.T) {
		ns := env.Namespace(t)
		hc := ruleHolder(t, ns, "editor", admission.TTLControllerUser)
		job := func(name string, ttl *int32) *batchv1.Job {
			return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: batchv1.JobSpec{TTLSecondsAfterFinished: ttl, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
		}
		for _, j := range []*batchv1.Job{job("ttl", ptr.To(int32(0))), job("nottl", nil)} {
			if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, j) }); err != nil {
				t.Fatal(err)
			}
		}
		ttl, editor := env.ClientAs(t, admission.TTLControllerUser), env.ClientAs(t, "editor")
		del := func(c client.Client, name string) error {
			return retryRBAC(t, "a Job delete", func() error {
				return c.Delete(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
			})
		}
		mustContain(t, "the TTL controller deletes a running Job with a TTL", del(ttl, "ttl"), fencing.IsNotHolder)
		mustContain(t, "the TTL controller deletes a Job without a TTL", del(ttl, "nottl"), fencing.IsNotHolder)
		mustContain(t, "an editor writes a Complete status", retryRBAC(t, "a status patch", func() error {
			return editor.Status().Patch(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ttl"}},
				client.RawPatch(types.MergePatchType, []byte(`{"status":{"conditions":[{"type":"Complete","status":"True"}]}}`)))
		}), nil)
		mustContain(t, "an editor deletes the Job with a TTL", del(editor, "ttl"), fencing.IsNotHolder)
	})

	// The delete precondition: only the stored resourceVersion of the holder's marker write.
	t.Run("deletes under a live Lease and their preconditions", func(t *testing.T) {
		ns := env.Namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Fences, r2.Fences = protocol.Fences{Objects: true}, protocol.Fences{Objects: true}
		grantRuleObjects(t, ns, r1.User)
		grantPolicies(t, ns, r1.User)
		rulePolicy(t, ns)
		_, c1 := holderClient(t, r1, ns, appLease, 1)
		for _, n := range []string{"paused", "uid", "coll-a", "coll-b"} {
			if err := retryRBAC(t, "the holder's create", func() error {
				return c1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}, Data: map[string]string{"v": "1"}})
			}); err != nil {
				t.Fatal(err)
			}
		}
		marker := func(c client.Client, name string, epoch int64) *corev1.ConfigMap {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
			p := `{"metadata":{"annotations":{"` + fencingv1alpha1.DeleteAtEpochAnnotation + `":"` + strconv.FormatInt(epoch, 10) + `","` +
				fencingv1alpha1.ObjectEpochAnnotation + `":"` + strconv.FormatInt(epoch, 10) + `"}}}`
			if err := c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(protocol.FieldManagerFor(epoch))); err != nil {
				t.Fatalf("marker on %s: %v", name, err)
			}
			return cm
		}
		// replica-1 writes its marker (Writer.Delete's first step), pauses; replica-2 takes over and fences.
		paused := marker(r1.Client, "paused", 1)
		t2 := r2.Acquire(t, ns, appLease, 2)
		fenceObjects(t, r2, t2)
		rv, uid := paused.ResourceVersion, paused.UID
		mustContain(t, "replica-1 resumes its delete with its marker write's resourceVersion",
			r1.Client.Delete(ctx, paused, client.Preconditions{ResourceVersion: &rv, UID: &uid}), nil)
		// The holder's marker at the current epoch, and deletes naming only the UID, or another object's version.
		m := marker(r2.Client, "uid", 2)
		u := m.UID
		mustContain(t, "a delete naming only the UID", r2.Client.Delete(ctx, m.DeepCopy(), client.Preconditions{UID: &u}), fencing.IsTokenMissing)
		a := marker(r2.Client, "coll-a", 2)
		marker(r2.Client, "coll-b", 2)
		arv := a.ResourceVersion
		err := r2.Client.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.Preconditions{ResourceVersion: &arv})
		t.Logf("deletecollection with coll-a's resourceVersion: %v", err)
		for _, n := range []string{"coll-b", "uid"} {
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: n}, &corev1.ConfigMap{}); err != nil {
				t.Errorf("ConfigMap %s after a deletecollection naming another object's resourceVersion: %v", n, err)
			}
		}
	})

	// kube-root-ca.crt is never covered as a ConfigMap, and only as one.
	t.Run("the name kube-root-ca.crt in another resource", func(t *testing.T) {
		ns := env.Namespace(t)
		hc := ruleHolder(t, ns, "editor")
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}, Data: map[string][]byte{"v": []byte("holder")}}
		if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, s) }); err != nil {
			t.Fatal(err)
		}
		editor := env.ClientAs(t, "editor")
		mustContain(t, "an editor writes Secret kube-root-ca.crt", patchDecided(t, "a secret patch", editor,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}}, `{"data":{"v":"ZXZpbA=="}}`), fencing.IsTokenMissing)
		mustContain(t, "an editor deletes Secret kube-root-ca.crt", editor.Delete(ctx,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}}), fencing.IsNotHolder)
		fr := declare(t, ns, "kube-root-ca.crt", appLease)
		grantFencedResources(t, ns, "editor")
		mustContain(t, "an editor writes FencedResource kube-root-ca.crt", retryRBAC(t, "a FencedResource patch", func() error {
			return mergePatch(t, editor, fr, `{"spec":{"epoch":1,"data":{"v":"evil"}}}`)
		}), nil)
	})
}
