package admission_test

// The attempts of an independent attacker, briefed on the invariants of docs/design/threat-model.md and
// not on the rule's code, on the real apiserver: each asserts the invariant it tried to break. The ones
// whose holes are not closed yet are in open_holes_test.go (build tag openholes).

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// Independent attacks (security review). Each test asserts the invariant: it fails when the attack works.

// annotationLimit is the apiserver's bound on the total size of an object's annotations (keys and values):
// k8s.io/apimachinery's TotalAnnotationSizeLimitB.
const annotationLimit = 256 * 1024

// padAnnotationsPatch returns a merge patch that adds one annotation so that the object's annotations
// (have) total exactly annotationLimit bytes.
func padAnnotationsPatch(have map[string]string) string {
	n := 0
	for k, v := range have {
		n += len(k) + len(v)
	}
	const key = "example.com/pad"
	return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, strings.Repeat("x", annotationLimit-n-len(key)))
}

// TestIndependentAnnotationsAtTheLimit: a FencedResource's annotations (but fencekit's) are free without a
// token, bounded only by MaxFreeObjectBytes (512 KiB), which is above the apiserver's own 256 KiB bound
// on annotations. An editor fills the annotations of a declaration and of a resource the holder wrote
// exactly to the apiserver's bound. The raise of fence-on-acquire adds the writer annotation to the
// declaration, and Writer.Delete adds the deletion marker: both would then be refused by the apiserver's
// validation (I2, I3: a non-holder makes every acquisition fail, and the holder's delete fail).
func TestIndependentAnnotationsAtTheLimit(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "ann"
	holder := newWorker(t, ns, "app-operator")
	holder.Fences.FencedResources = true
	env.Grant(t, ns, "fr-all", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources"}, Verbs: []string{"get", "list", "watch", "patch", "update", "delete", "create"}}}, holder.User, "editor")
	decl := declare(t, ns, "decl", lease)
	written := declare(t, ns, "written", lease)
	tok := holder.Acquire(t, ns, lease, 1)
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, written, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
	for _, key := range []types.NamespacedName{decl, written} {
		patch := padAnnotationsPatch(get(t, key).Annotations)
		err := retryRBAC(t, "the editor's annotations", func() error { return mergePatch(t, editor, key, patch) })
		t.Logf("the editor fills the annotations of %s to %d bytes: %v", key, annotationLimit, err)
	}

	tok2 := holder.Acquire(t, ns, lease, 2)
	if err := fencing.FenceOnAcquire(holder.Client).Raise(ctx, tok2); err != nil {
		t.Errorf("fence-on-acquire after the editor's annotations (I3: the acquisition fails): %v", err)
	}
	if err := w.Delete(ctx, tok2, written); err != nil {
		t.Errorf("the holder's Writer.Delete after the editor's annotations (I2): %v", err)
	}
	if _, err := w.Set(ctx, tok2, decl, map[string]any{"v": 2}); err != nil {
		t.Errorf("the holder's Writer.Set of the declaration after the editor's annotations (I2): %v", err)
	}
}

// TestIndependentFinalizerPaddingVersusALargeConfigMap: the bound on tokenless growth (512 KiB, the whole
// object) leaves "at least 1 MiB" of room below etcd's 1.5 MiB request limit; but a ConfigMap may hold
// 1 MiB of data itself (the apiserver's own bound). An editor pads a fenced ConfigMap with finalizers
// (free) up to the bound; the holder's next write of a ConfigMap of legal size (binaryData just under
// 1 MiB), which goes through on an unpadded twin, then fails for the padded one (I2).
func TestIndependentFinalizerPaddingVersusALargeConfigMap(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	for _, name := range []string{"padded", "twin"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"a": "1"}}
		if err := retryRBAC(t, "the holder's create", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatal(err)
		}
	}
	editor := env.ClientAs(t, "editor")
	// Finalizers of the longest names, added in batches by one merge patch each, until the bound refuses.
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4)[:252] + "x"
	var fins []string
	for batch := 0; ; batch++ {
		next := append([]string(nil), fins...)
		for i := range 100 {
			next = append(next, fmt.Sprintf("%s/%063d", prefix, batch*100+i))
		}
		b := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": next}})
		if err := patchConfigMap(t, editor, ns, "padded", string(b)); err != nil {
			t.Logf("padding stops after %d finalizers: %v", len(fins), err)
			break
		}
		fins = next
	}
	// Fill the rest of the bound with smaller batches.
	for _, step := range []int{10, 1} {
		for {
			next := append([]string(nil), fins...)
			for i := range step {
				next = append(next, fmt.Sprintf("%s/%063d", prefix, 100000+len(fins)+i))
			}
			b := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": next}})
			if err := patchConfigMap(t, editor, ns, "padded", string(b)); err != nil {
				break
			}
			fins = next
		}
	}
	t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, "padded", `{"metadata":{"finalizers":null}}`) })
	raw := mustJSON(t, readConfigMap(t, ns, "padded"))
	t.Logf("the editor padded ConfigMap %s/padded with %d finalizers: %d bytes of JSON", ns, len(fins), len(raw))

	big := make([]byte, 1024*1024-64)
	for i := range big {
		big[i] = byte(i)
	}
	apply := func(name string) error {
		return fenced.Apply(ctx, corev1ac.ConfigMap(name, ns).WithBinaryData(map[string][]byte{"blob": big}))
	}
	if err := apply("twin"); err != nil {
		t.Fatalf("the holder's apply of %d bytes to the unpadded twin: %v", len(big), err)
	}
	if err := apply("padded"); err != nil {
		t.Errorf("the holder's apply of %d bytes (legal for a ConfigMap) after the editor's padding (I2): %v", len(big), err)
	}
	other := base64.StdEncoding.EncodeToString(append([]byte{1}, big[1:]...))
	for _, name := range []string{"twin", "padded"} {
		if err := patchConfigMap(t, fenced, ns, name, fmt.Sprintf(`{"binaryData":{"blob":%q}}`, other)); err != nil {
			t.Errorf("the holder's merge patch of %d bytes to %s (I2): %v", len(big), name, err)
		}
	}
}

// storm runs write from g goroutines, as fast as the apiserver takes it, until the returned stop is called;
// it returns the count of admitted writes.
func storm(t *testing.T, g int, write func(ctx context.Context, g, i int) error) (admitted *atomic.Int64, stop func()) {
	return stormAtLeast(t, g, 20, write)
}

// stormAtLeast is storm, waiting for least admitted writes before it returns.
func stormAtLeast(t *testing.T, g int, least int64, write func(ctx context.Context, g, i int) error) (admitted *atomic.Int64, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	admitted = &atomic.Int64{}
	for n := range g {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				if write(ctx, n, i) == nil {
					admitted.Add(1)
				}
			}
		})
	}
	testenv.Eventually(t, "the storm writes", func() (bool, string) { return admitted.Load() >= least, fmt.Sprint(admitted.Load()) })
	return admitted, func() { cancel(); wg.Wait() }
}

// TestIndependentArmedMarkerStallsTheDeletion: while the holder's deletion marker is the Lease's current
// epoch, writes without the token are refused. The marker stays on an object whose DELETE was admitted
// (the DELETE only sets deletionTimestamp while finalizers remain), so the finalizers that hold the deletion
// cannot be removed by whoever owns them: another controller's finalizer (free to add, as it must be free
// to remove) and the garbage collector's foregroundDeletion after a foreground delete. The holder's delete
// never completes during its term: the object, its data and (foreground) its dependents' owner stay (I4).
func TestIndependentArmedMarkerStallsTheDeletion(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "backup-controller", "system:serviceaccount:kube-system:generic-garbage-collector")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	backup := env.ClientAs(t, "backup-controller")
	gc := env.ClientAs(t, "system:serviceaccount:kube-system:generic-garbage-collector")
	for _, name := range []string{"kept", "fg"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": "1"}}
		if err := retryRBAC(t, "the holder's create", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := retryRBAC(t, "the backup controller's finalizer", func() error {
		return patchConfigMap(t, backup, ns, "kept", `{"metadata":{"finalizers":["example.com/backup"]}}`)
	}); err != nil {
		t.Fatalf("a controller adds its finalizer (free): %v", err)
	}
	if err := fenced.Delete(ctx, readConfigMap(t, ns, "kept")); err != nil {
		t.Fatalf("the holder's delete: %v", err)
	}
	if err := fenced.Delete(ctx, readConfigMap(t, ns, "fg"), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatalf("the holder's foreground delete: %v", err)
	}
	t.Cleanup(func() {
		for _, name := range []string{"kept", "fg"} {
			_ = patchConfigMap(t, env.Client, ns, name, `{"metadata":{"finalizers":null}}`)
		}
	})
	if err := patchConfigMap(t, backup, ns, "kept", `{"metadata":{"finalizers":null}}`); err != nil {
		t.Errorf("the controller removes its finalizer from the object the holder deleted (the deletion then completes): %v", err)
	}
	if err := retryRBAC(t, "the garbage collector's removal", func() error {
		return patchConfigMap(t, gc, ns, "fg", `{"metadata":{"finalizers":null}}`)
	}); err != nil {
		t.Errorf("the garbage collector removes foregroundDeletion once the dependents are gone (the deletion then completes): %v", err)
	}
}

// TestIndependentPodSubresources: with a FencingPolicy covering pods, a user with RBAC on pods and every
// subresource (not the holder) evicts a fenced Pod (the eviction's DELETE is made inside the apiserver
// without admission: only the eviction's CREATE is seen), adds an ephemeral container, resizes it, writes
// its status. Each must be refused by fencekit (I1), and the Pod kept as the holder wrote it.
func TestIndependentPodSubresources(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/eviction", "pods/ephemeralcontainers",
		"pods/resize", "pods/status"}, Verbs: []string{"*"}}}, holder.User, "attacker")
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	if err := retryRBAC(t, "the holder's pod", func() error { return fenced.Create(ctx, pod.DeepCopy()) }); err != nil {
		t.Fatal(err)
	}
	attacker := env.ClientAs(t, "attacker")
	cur := testenv.Read[corev1.Pod](t, env.Client, ns, "p")
	err := retryRBAC(t, "an eviction", func() error {
		return attacker.SubResource("eviction").Create(ctx, cur.DeepCopy(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}})
	})
	mustContain(t, "a non-holder evicts a fenced Pod", err, nil)
	eph := cur.DeepCopy()
	eph.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "busybox"}}}
	mustContain(t, "a non-holder adds an ephemeral container", attacker.SubResource("ephemeralcontainers").Update(ctx, eph), nil)
	rs := cur.DeepCopy()
	rs.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
	err = attacker.SubResource("resize").Update(ctx, rs)
	mustContain(t, "a non-holder resizes a fenced Pod", err, nil)
	st := cur.DeepCopy()
	st.Status.Message = "attacker"
	mustContain(t, "a non-holder writes a fenced Pod's status", attacker.Status().Update(ctx, st), nil)
	got := &corev1.Pod{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "p"}, got); err != nil {
		t.Fatalf("the fenced Pod after the attacks: %v", err)
	}
	if got.DeletionTimestamp != nil || len(got.Spec.EphemeralContainers) > 0 || got.Status.Message == "attacker" ||
		got.Spec.Containers[0].Resources.Requests.Cpu().String() != "100m" {
		t.Errorf("the fenced Pod changed by a non-holder: deletion %v, ephemeral %v, status message %q, cpu %s", got.DeletionTimestamp,
			got.Spec.EphemeralContainers, got.Status.Message, got.Spec.Containers[0].Resources.Requests.Cpu())
	}
}

// TestIndependentEmptyValuesAreContent: the rule's diff counts an absent value, null, an empty map and an
// empty list as the same. For a custom resource a FencingPolicy covers, they are not: the apiserver stores
// `tls: {}` and `args: []` as written, and a controller reads `tls: {}` as "TLS with defaults" and an
// absent `tls` as "no TLS". A user without the token removes the holder's `spec.tls: {}` and `spec.args: []`,
// and adds `spec.debug: {}` where the holder had none: each changes what the holder wrote (I1).
func TestIndependentEmptyValuesAreContent(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.attack.test.fencekit.io"},
		"spec": map[string]any{"group": "attack.test.fencekit.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"spec": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}},
	}}
	if err := env.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	widget := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("attack.test.fencekit.io/v1")
		u.SetKind("Widget")
		u.SetNamespace(ns)
		u.SetName("w")
		return u
	}
	testenv.Eventually(t, "the Widget CRD is served", func() (bool, string) {
		err := env.Client.List(ctx, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "attack.test.fencekit.io/v1", "kind": "WidgetList"}}, client.InNamespace(ns))
		return err == nil, testenv.ErrString(err)
	})
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "widgets", []rbacv1.PolicyRule{{APIGroups: []string{"attack.test.fencekit.io"}, Resources: []string{"widgets"}, Verbs: []string{"*"}}}, holder.User, "editor")
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Group: "attack.test.fencekit.io", Resource: "widgets"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	w := widget()
	w.Object["spec"] = map[string]any{"replicas": int64(1), "tls": map[string]any{}, "args": []any{}}
	if err := retryRBAC(t, "the holder's widget", func() error { return fenced.Create(ctx, w) }); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
	for _, patch := range []string{`{"spec":{"tls":null}}`, `{"spec":{"args":null}}`, `{"spec":{"debug":{}}}`, `{"spec":{"hosts":[]}}`} {
		err := retryRBAC(t, "the editor's patch", func() error { return editor.Patch(ctx, widget(), client.RawPatch(types.MergePatchType, []byte(patch))) })
		mustContain(t, "a user without the token patches the holder's Widget with "+patch, err, fencing.IsTokenMissing)
	}
	got := widget()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
		t.Fatal(err)
	}
	spec := got.Object["spec"].(map[string]any)
	_, hasTLS := spec["tls"]
	_, hasArgs := spec["args"]
	_, hasDebug := spec["debug"]
	_, hasHosts := spec["hosts"]
	if !hasTLS || !hasArgs || hasDebug || hasHosts {
		t.Errorf("the holder's Widget spec after the editor's patches: %v (want tls: {} and args: [] kept, no debug or hosts)", spec)
	}
}

// TestIndependentHolderFinalizerRemoved: finalizers are free without the token, to add and to remove, but
// for orphan and foregroundDeletion. A finalizer the holder put on its object is deletion semantics too: it
// keeps the object (and its data) until the holder's controller has cleaned up what the object stands
// for. A user without the token removes it; the holder's later delete then completes at once, without the
// cleanup (I1: deletion semantics; I4).
func TestIndependentHolderFinalizerRemoved(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Finalizers: []string{"example.com/holder-cleanup"}},
		Data: map[string]string{"v": "1"}}
	if err := retryRBAC(t, "the holder's create", func() error { return fenced.Create(ctx, cm) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, "app", `{"metadata":{"finalizers":null}}`) })
	editor := env.ClientAs(t, "editor")
	err := retryRBAC(t, "the editor's patch", func() error { return patchConfigMap(t, editor, ns, "app", `{"metadata":{"finalizers":null}}`) })
	mustContain(t, "a user without the token removes the holder's finalizer", err, nil)
	if got := readConfigMap(t, ns, "app"); !containsString(got.Finalizers, "example.com/holder-cleanup") {
		t.Errorf("the holder's finalizer removed by a user without the token: finalizers %v", got.Finalizers)
	}
}

// TestIndependentAnnotationToggleVersusFirstSet: Writer.Set's one JSON patch adds the writer annotation to
// the stored annotations map; a declaration that has none is written by a second patch that tests the map
// is still absent. A user without the token toggles a free annotation on declarations (present, absent,
// present...) as fast as the apiserver takes it: Set's first patch finds no map, its read or its second
// patch finds one, and the holder's first write of the declaration fails (I2: Writer.Set), with no conflict
// to retry.
func TestIndependentAnnotationToggleVersusFirstSet(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "editor")
	tok := holder.Acquire(t, ns, "l", 1)
	const n = 12
	keys := make([]types.NamespacedName, n)
	for i := range keys {
		keys[i] = declare(t, ns, fmt.Sprintf("d%02d", i), "l")
	}
	w := fencing.NewWriter(unthrottled(t, holder.User))
	ctl := declare(t, ns, "control", "l")
	if _, err := retryRBACValue(t, "the holder's first write of a declaration, no toggle (control)", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, ctl, map[string]any{"v": 0})
	}); err != nil {
		t.Fatalf("the holder's first write of a declaration, no toggle (control): %v", err)
	}
	editor := unthrottled(t, "editor")
	var target atomic.Pointer[types.NamespacedName]
	target.Store(&keys[0])
	admitted, stop := storm(t, 4, func(ctx context.Context, g, i int) error {
		key := target.Load()
		v := `"x"`
		if i%2 == 1 {
			v = "null"
		}
		return editor.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"annotations":{"example.com/t":%s}}}`, v))))
	})
	failures := 0
	for i := range keys {
		target.Store(&keys[i])
		time.Sleep(20 * time.Millisecond)
		if _, err := w.Set(ctx, tok, keys[i], map[string]any{"v": i}); err != nil {
			failures++
			t.Logf("the holder's first Writer.Set of %s during the toggle: %v", keys[i], err)
		}
	}
	stop()
	t.Logf("%d toggles admitted; %d of %d first writes failed", admitted.Load(), failures, n)
	if failures > 0 {
		t.Errorf("the holder's Writer.Set failed %d of %d times under a toggle of a free annotation (I2)", failures, n)
	}
	// No storm: one annotation added and removed before the holder's first write.
	once := declare(t, ns, "once", "l")
	for _, v := range []string{`"x"`, "null"} {
		if err := mergePatch(t, editor, once, fmt.Sprintf(`{"metadata":{"annotations":{"example.com/t":%s}}}`, v)); err != nil {
			t.Fatal(err)
		}
	}
	raw := mustJSON(t, get(t, once).Annotations)
	if _, err := w.Set(ctx, tok, once, map[string]any{"v": 1}); err != nil {
		t.Errorf("the holder's first Writer.Set after one annotation was added and removed (annotations now %s): %v", raw, err)
	}
}

// TestIndependentDuplicateFinalizers: metadata.finalizers is a set to server-side apply; the apiserver's
// validation does not refuse a list that names one finalizer twice. A user without the token writes the
// same free finalizer twice on a fenced ConfigMap and a FencedResource; the holder's next server-side apply,
// merge patch and Writer.Set must still go through (I2).
func TestIndependentDuplicateFinalizers(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's apply", func() error {
		return fenced.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"v": "1"}))
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, "app", `{"metadata":{"finalizers":null}}`) })
	editor := env.ClientAs(t, "editor")
	err := retryRBAC(t, "the editor's finalizers", func() error {
		return patchConfigMap(t, editor, ns, "app", `{"metadata":{"finalizers":["example.com/dup","example.com/dup"]}}`)
	})
	t.Logf("a user without the token writes one finalizer twice: %v (finalizers now %v)", err, readConfigMap(t, ns, "app").Finalizers)
	if err := fenced.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"v": "2"})); err != nil {
		t.Errorf("the holder's apply after duplicate finalizers (I2): %v", err)
	}
	if err := patchConfigMap(t, fenced, ns, "app", `{"data":{"w":"3"}}`); err != nil {
		t.Errorf("the holder's merge patch after duplicate finalizers (I2): %v", err)
	}

	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "editor")
	frTok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "fr", "l")
	t.Cleanup(func() { _ = mergePatch(t, env.Client, key, `{"metadata":{"finalizers":null}}`) })
	err = retryRBAC(t, "the editor's finalizers", func() error {
		return mergePatch(t, editor, key, `{"metadata":{"finalizers":["example.com/dup","example.com/dup"]}}`)
	})
	t.Logf("a user without the token writes one finalizer twice on a FencedResource: %v", err)
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, frTok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Errorf("the holder's Writer.Set after duplicate finalizers (I2): %v", err)
	}
	if err := fencing.FenceOnAcquire(holder.Client).Raise(ctx, holder.Acquire(t, ns, "l", 2)); err != nil {
		t.Errorf("fence-on-acquire after duplicate finalizers (I2): %v", err)
	}
}

// TestIndependentFinalizerStormVersusObjectDelete: the armed-marker rule on the objects' route. A user
// without the token toggles a free finalizer on fenced ConfigMaps as fast as the apiserver takes it while
// the holder deletes them with fencing.NewClient's Delete: each delete must go through (I2).
func TestIndependentFinalizerStormVersusObjectDelete(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(unthrottled(t, holder.User), tokenOf(tok))
	const n = 8
	for i := range n {
		if err := retryRBAC(t, "the holder's create", func() error {
			return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%d", i)}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	editor := unthrottled(t, "editor")
	var target atomic.Int64
	admitted, stop := storm(t, 4, func(ctx context.Context, g, i int) error {
		f := `["example.com/toggle"]`
		if i%2 == 1 {
			f = "null"
		}
		return patchConfigMap(t, editor, ns, fmt.Sprintf("cm-%d", target.Load()), fmt.Sprintf(`{"metadata":{"finalizers":%s}}`, f))
	})
	for i := range n {
		target.Store(int64(i))
		time.Sleep(20 * time.Millisecond)
		dctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		err := fenced.Delete(dctx, readConfigMap(t, ns, fmt.Sprintf("cm-%d", i)))
		cancel()
		if err != nil {
			t.Errorf("the holder's delete of cm-%d during a finalizer storm (I2): %v", i, err)
		}
	}
	stop()
	for i := range n {
		_ = patchConfigMap(t, env.Client, ns, fmt.Sprintf("cm-%d", i), `{"metadata":{"finalizers":null}}`)
	}
	t.Logf("%d finalizer toggles admitted during the deletes", admitted.Load())
}

// TestIndependentSecondDeleteShortensGrace: the holder deletes a bound, fenced Pod with a 300 s grace
// period; a user with delete on pods (not the holder) sends a second DELETE with gracePeriodSeconds 0, 1
// and -5 (the apiserver turns a negative period into 1 s before admission sees it). Each would shorten the
// holder's deletion: refused (I4). A second DELETE with a longer period changes nothing.
func TestIndependentSecondDeleteShortensGrace(t *testing.T) {
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
	scheduler := env.ClientAs(t, "system:kube-scheduler")
	if err := retryRBAC(t, "the scheduler's binding", func() error {
		return scheduler.Create(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}})
	}); err != nil {
		t.Fatal(err)
	}
	cur := testenv.Read[corev1.Pod](t, env.Client, ns, "p")
	if err := fenced.Delete(ctx, cur, client.GracePeriodSeconds(300)); err != nil {
		t.Fatalf("the holder's graceful delete: %v", err)
	}
	attacker := env.ClientAs(t, "attacker")
	for _, g := range []int64{0, 1, -5} {
		err := retryRBAC(t, "the attacker's delete", func() error {
			return attacker.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}, client.GracePeriodSeconds(g))
		})
		mustContain(t, fmt.Sprintf("a non-holder's second DELETE with gracePeriodSeconds=%d", g), err, nil)
	}
	if err := attacker.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}, client.GracePeriodSeconds(600)); err != nil {
		t.Logf("a non-holder's second DELETE with a longer period: %v", err)
	}
	got := testenv.Read[corev1.Pod](t, env.Client, ns, "p")
	if g := got.DeletionGracePeriodSeconds; g == nil || *g != 300 {
		t.Errorf("the holder's grace period after the second DELETEs: %v, want 300", g)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), got, client.GracePeriodSeconds(0)) })
}

// mustJSON is v encoded as JSON.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
