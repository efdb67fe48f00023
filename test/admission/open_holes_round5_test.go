//go:build openholes

package admission_test

// Round 5 of the independent attacker: attacks that worked. Each test asserts the invariant it tried to
// break (it fails while the attack works).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round5Conditions is a status patch with n Pod conditions of 6-character types.
func round5Conditions(t *testing.T, n int) string {
	conds := make([]map[string]any, n)
	for i := range conds {
		conds[i] = map[string]any{"type": fmt.Sprintf("c%05d", i), "status": "True"}
	}
	return string(mustJSON(t, map[string]any{"status": map[string]any{"conditions": conds}}))
}

// TestRound5KubeletPadsItsPodsStatus: the cluster's own controllers, kubelets among them (any member of
// system:nodes), are exempt from MaxFreePartBytes and MaxFreePartEntries, held only to the 512 KiB bound on
// the whole object, and their status writes are free. A kubelet (compromised node, or any credential in
// system:nodes; NodeRestriction lets it write the status of the Pods bound to its node) pads the status
// of each of 60 holder-written Pods on its node, first with one condition carrying a message of about 480
// KiB, then with as many tiny conditions as the whole-object bound lets in (control: one condition). The fence at the default
// PostAcquireTimeout must raise every holder-written Pod in both cases (I3: the time of an acquisition may
// not grow with what non-holders write).
func TestRound5KubeletPadsItsPodsStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const n, node = 60, "n1"
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	kubelet := "system:node:" + node
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"*"}}}, holder.User, kubelet)
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	env.Grant(t, ns, "holder-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"list"}}}, holder.User)
	fenced := fencing.NewClient(unthrottled(t, holder.User), tokenOf(tok))
	_, cfg, err := env.UserClient(kubelet, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	kc, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%03d", i)},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if err := retryRBAC(t, "the holder's pod", func() error { return fenced.Create(ctx, pod) }); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name, patch string) error {
		return kc.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	most := 0
	for k := 7000; k > 0 && most == 0; k -= 250 {
		if err := retryRBAC(t, "the kubelet's status", func() error { return status("p-000", round5Conditions(t, k)) }); err == nil {
			most = k
		} else if k == 7000 {
			t.Logf("%d conditions: %.300s", k, err)
		}
	}
	if most == 0 {
		t.Fatal("no status padding admitted")
	}
	p0 := testenv.Read[corev1.Pod](t, env.Client, ns, "p-000")
	size := len(mustJSON(t, p0))
	t.Logf("the whole-object bound lets in %d conditions of the kubelet's: the Pod is %d bytes", most, size)
	tiny := round5Conditions(t, most-200)
	long := string(mustJSON(t, map[string]any{"status": map[string]any{"conditions": []map[string]any{{"type": "c00000", "status": "True",
		"message": strings.Repeat("m", size-24*1024)}}}}))
	pad := func(patch string) {
		var failed atomic.Int64
		workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
			name := fmt.Sprintf("p-%03d", i)
			if err := status(name, `{"status":{"conditions":null}}`); err != nil && failed.Add(1) == 1 {
				t.Errorf("%s: %v", name, err)
			}
			if err := status(name, patch); err != nil && failed.Add(1) == 1 {
				t.Errorf("%s: %.300v", name, err)
			}
		})
		if failed.Load() > 0 {
			t.Fatalf("%d pods not padded", failed.Load())
		}
	}
	fc, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	fence := func(what string, epoch int64) {
		tok := holder.Acquire(t, ns, appLease, epoch)
		fctx, cancel := context.WithTimeout(ctx, elector.DefaultRenewDeadline)
		defer cancel()
		start := time.Now()
		err := fc.Raise(fctx, tok)
		took := time.Since(start)
		raised := 0
		for i := range n {
			p := testenv.Read[corev1.Pod](t, env.Client, ns, fmt.Sprintf("p-%03d", i))
			if p.Annotations[fencingv1alpha1.ObjectEpochAnnotation] == fmt.Sprint(epoch) {
				raised++
			}
		}
		msg := ""
		if err != nil {
			msg = err.Error()
			if i := strings.Index(msg, "\n"); i > 0 {
				msg = msg[:i] + " ..."
			}
		}
		t.Logf("%s: the fence at epoch %d took %v; %d of %d holder-written Pods raised; error: %s", what, epoch, took, raised, n, msg)
		if err != nil || raised < n {
			t.Errorf("fence-on-acquire at the default PostAcquireTimeout (%v), %s: %d of %d holder-written Pods raised (I3): %s",
				elector.DefaultRenewDeadline, what, raised, n, msg)
		}
	}
	pad(`{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`)
	fence("each Pod's status with one condition (control)", 2)
	pad(long)
	fence(fmt.Sprintf("each Pod's status padded by the kubelet with one condition of a %d-byte message", size-24*1024), 3)
	pad(tiny)
	fence(fmt.Sprintf("each Pod's status padded by the kubelet with %d tiny conditions", most-200), 4)
}

// TestRound5ScaleCheckReadsACache: NewClient's SubResource("scale") reads the object's metadata through
// the client it wraps ("reads go to c unchanged"), and a controller-runtime manager's client reads from
// its cache. The holder, with NewClient over a cached client (as a manager gives it), deletes its
// Deployment (held by another user's free finalizer) and at once scales it: the check reads the cache,
// which has not yet seen the deletion, and the scale is sent and admitted. The other user removes its
// finalizer: the acknowledged scale is gone with the Deployment ("nothing is lost").
func TestRound5ScaleCheckReadsACache(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	informers, err := cache.New(holder.Config, cache.Options{Scheme: env.Client.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	cached, err := client.New(holder.Config, client.Options{Scheme: env.Client.Scheme(), Cache: &client.CacheOptions{Reader: informers}})
	if err != nil {
		t.Fatal(err)
	}
	fenced := fencing.NewClient(cached, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	const n = 10
	admitted := 0
	for i := range n {
		name := fmt.Sprintf("app-%d", i)
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
		if err := retryRBAC(t, "the holder's Deployment", func() error { return fenced.Create(ctx, dep) }); err != nil {
			t.Fatal(err)
		}
		if err := retryRBAC(t, "the editor's finalizer", func() error {
			return editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)))
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		// The cache has seen the Deployment with the finalizer (the manager's client has been reading it).
		testenv.Eventually(t, "the cache shows the finalizer", func() (bool, string) {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
			err := cached.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, m)
			return err == nil && len(m.Finalizers) == 1, testenv.ErrString(err)
		})
		cur := testenv.Read[appsv1.Deployment](t, env.Client, ns, name)
		if err := fenced.Delete(ctx, cur); err != nil {
			t.Fatalf("the holder's delete: %v", err)
		}
		scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
		err := fenced.SubResource("scale").Update(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.WithSubResourceBody(scale))
		stored := testenv.Read[appsv1.Deployment](t, env.Client, ns, name)
		t.Logf("%s: the holder's scale to 5 right after its delete: %v (stored: deletionTimestamp %v, replicas %d)", name, err, stored.DeletionTimestamp, *stored.Spec.Replicas)
		if err == nil && stored.DeletionTimestamp != nil && *stored.Spec.Replicas == 5 {
			admitted++
			if err := editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
				t.Logf("the editor's removal of its finalizer: %v", err)
			}
			testenv.Eventually(t, name+" is gone", func() (bool, string) {
				err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &appsv1.Deployment{})
				return apierrors.IsNotFound(err), testenv.ErrString(err)
			})
		}
	}
	if admitted > 0 {
		t.Errorf("%d of %d scale writes of NewClient over a cached client, right after the holder's own delete, were admitted on a Deployment being deleted: they go with it once another user removes its finalizer (nothing is lost)", admitted, n)
	}
}

// TestRound5ManyEpochsLockOutControllerStatus: every write of the holder at a new epoch that sets a field
// of its own adds a managedFields entry of another manager (fencing.fencekit.io/epoch=N, operation Update;
// here a template annotation per epoch, kept by the entry that set it), and the
// apiserver keeps at most 10 Update entries, merging the oldest into "ancient-changes". After the holder
// has written its Deployment at 11 epochs (11 acquisitions), the Deployment controller's first status write
// (free for it: allowlist.md, "status.* through the status subresource") makes the apiserver merge another
// of the holder's entries into "ancient-changes", and is refused for that: the cluster's controller can no
// longer report the holder's Deployment. Control: the same write after one epoch. Not one of I1 to I4: a
// regression of the managedFields rule against the allowlist's entry (as
// TestRound4HolderSizedMetadataLocksOutControllerStatus).
func TestRound5ManyEpochsLockOutControllerStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const controller = "system:serviceaccount:kube-system:deployment-controller"
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, controller)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	kcm := env.ClientAs(t, controller)
	mk := func(name string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	}
	tok := holder.Acquire(t, ns, appLease, 1)
	for _, name := range []string{"control", "app"} {
		fenced := fencing.NewClient(holder.Client, tokenOf(tok))
		if err := retryRBAC(t, "the holder's Deployment", func() error { return fenced.Create(ctx, mk(name)) }); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string) error {
		d := testenv.Read[appsv1.Deployment](t, env.Client, ns, name)
		d.Status.ObservedGeneration, d.Status.Replicas = d.Generation, 1
		return kcm.Status().Update(ctx, d)
	}
	err := retryRBAC(t, "the controller's status", func() error { return status("control") })
	t.Logf("control: the Deployment controller's first status write after one epoch: %v", err)
	for e := int64(2); e <= 12; e++ {
		tok = holder.Acquire(t, ns, appLease, e)
		fenced := fencing.NewClient(holder.Client, tokenOf(tok))
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"example.com/epoch-%d":"x"}}}}}`, e)
		if err := fenced.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("the holder's write at epoch %d: %v", e, err)
		}
	}
	d := testenv.Read[appsv1.Deployment](t, env.Client, ns, "app")
	var managers []string
	for _, m := range d.ManagedFields {
		managers = append(managers, m.Manager+"/"+string(m.Operation))
	}
	t.Logf("after 12 epochs the Deployment's entries are %v", managers)
	err = status("app")
	t.Logf("the Deployment controller's first status write after 12 epochs: %.400v", err)
	if err != nil {
		t.Errorf("the Deployment controller's first status write to the holder's Deployment, after the holder wrote it at 12 epochs, was refused: %.400v", err)
	}
}

// TestRound5HolderFinalizerFreeAfterManyEpochs: a finalizer the holder set stays the holder's: a user
// without the token may not remove it, since the holder's (epoch manager's) managedFields entry owns it
// (allowlist.md, "finalizers ... but one the holder's entry owns"). The apiserver keeps at most 10 Update
// entries and merges the oldest into "ancient-changes", a manager the rule does not know as the holder's.
// The holder creates a ConfigMap with its cleanup finalizer at epoch 1, then writes one key of its own at
// each of 11 later epochs; another user then removes the cleanup finalizer. Control: the same removal on a
// ConfigMap written at one epoch only.
func TestRound5HolderFinalizerFreeAfterManyEpochs(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	editor := env.ClientAs(t, "editor")
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	for _, name := range []string{"control", "cm"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{"example.com/cleanup"}}, Data: map[string]string{"v": "1"}}
		if err := retryRBAC(t, "the holder's create", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, name, `{"metadata":{"finalizers":null}}`) })
	}
	err := retryRBAC(t, "the editor's removal", func() error { return patchConfigMap(t, editor, ns, "control", `{"metadata":{"finalizers":null}}`) })
	t.Logf("control: another user removes the holder's cleanup finalizer after one epoch: %.300v", err)
	for e := int64(2); e <= 12; e++ {
		tok = holder.Acquire(t, ns, appLease, e)
		fenced := fencing.NewClient(holder.Client, tokenOf(tok))
		if err := fenced.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}},
			client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"k-%d":"x"}}`, e)))); err != nil {
			t.Fatalf("the holder's write at epoch %d: %v", e, err)
		}
	}
	var managers []string
	for _, m := range readConfigMap(t, ns, "cm").ManagedFields {
		managers = append(managers, m.Manager)
	}
	t.Logf("after 12 epochs the entries are %v", managers)
	err = patchConfigMap(t, editor, ns, "cm", `{"metadata":{"finalizers":null}}`)
	got := readConfigMap(t, ns, "cm")
	t.Logf("another user removes the holder's cleanup finalizer after 12 epochs: %.300v (finalizers now %q)", err, got.Finalizers)
	if err == nil {
		t.Errorf("a user without the token removed the holder's cleanup finalizer once the apiserver had merged the holder's entry into ancient-changes (finalizers now %q)", got.Finalizers)
	}
}

// round5PadEntry is a merge patch that keeps cm's managedFields and adds one entry of another manager
// owning fields set (fictitious: the object has none of them).
func round5PadEntry(t *testing.T, cm *corev1.ConfigMap, set map[string]any) string {
	t.Helper()
	mf := append([]metav1.ManagedFieldsEntry(nil), cm.ManagedFields...)
	mf = append(mf, metav1.ManagedFieldsEntry{Manager: "pad", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Now()}, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: mustJSON(t, set)}})
	return string(mustJSON(t, map[string]any{"metadata": map[string]any{"managedFields": mf}}))
}

// round5TinyOwned is a fieldsV1 set owning n fictitious finalizers, each "v:<i>" (a JSON number).
func round5TinyOwned(n int) map[string]any {
	fins := make(map[string]any, n)
	for i := range n {
		fins[fmt.Sprintf("v:%d", i)] = map[string]any{}
	}
	return map[string]any{"f:metadata": map[string]any{"f:finalizers": fins}}
}

// round5OneOwned is a fieldsV1 set owning one fictitious finalizer of about size bytes.
func round5OneOwned(size int) map[string]any {
	v, _ := json.Marshal(strings.Repeat("p", size))
	return map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{"v:" + string(v): map[string]any{}}}}
}

// TestRound5FictitiousOwnedFieldsSlowTheObjectFence: MaxFreePartEntries counts managedFields entries, not
// the fields they own, and the rule checks only that what an entry gains is free: a user without the
// token sends metadata.managedFields itself, adding one entry (count 1) that owns thousands of finalizers
// the object does not have ("v:0", "v:1", ...: about 11 bytes each, within 64 KiB). The apiserver keeps
// them, and every later write of the object (the raise too) decodes, diffs and re-encodes them. An editor
// pads each of 150 holder-written ConfigMaps first with one entry owning one finalizer of the same bytes
// (control), then with the many. The fence at the default PostAcquireTimeout must raise all of them (I3).
// Observed: the apiserver keeps the fictitious fields; the fence took about twice the control's time in
// every run (3.8 s against 7.9 s; 5.0 s against 10 s, 136 of 150 raised, failing; with 200 objects 6.6 s
// against 9.5 s): load-dependent.
func TestRound5FictitiousOwnedFieldsSlowTheObjectFence(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const n = 150
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	env.Grant(t, ns, "holder-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"list"}}}, holder.User)
	fenced := fencing.NewClient(unthrottled(t, holder.User), tokenOf(tok))
	editor := unthrottled(t, "editor")
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	most := 0
	for k := 6000; k > 0 && most == 0; k -= 250 {
		cm := readConfigMap(t, ns, "probe")
		if err := retryRBAC(t, "the editor's entry", func() error { return patchConfigMap(t, editor, ns, "probe", round5PadEntry(t, cm, round5TinyOwned(k))) }); err == nil {
			most = k
		} else if k == 6000 {
			t.Logf("%d owned fields: %v", k, err)
		}
	}
	if most == 0 {
		t.Fatal("no entry admitted")
	}
	stored := readConfigMap(t, ns, "probe")
	var owned int
	for _, e := range stored.ManagedFields {
		if e.Manager == "pad" {
			owned = strings.Count(e.FieldsV1.GetRawString(), "v:")
		}
	}
	t.Logf("the bound lets in one entry owning %d fictitious finalizers; the stored entry owns %d; metadata %d bytes, %d finalizers",
		most, owned, len(mustJSON(t, stored.ObjectMeta)), len(stored.Finalizers))
	if owned < most {
		t.Fatalf("the apiserver did not keep the fictitious fields (%d of %d)", owned, most)
	}
	size := len(mustJSON(t, round5TinyOwned(most-300)))
	for i := range n {
		name := fmt.Sprintf("cm-%03d", i)
		if err := fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	pad := func(set map[string]any) {
		var failed atomic.Int64
		workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
			name := fmt.Sprintf("cm-%03d", i)
			cm := readConfigMap(t, ns, name)
			var keep []metav1.ManagedFieldsEntry
			for _, e := range cm.ManagedFields {
				if e.Manager != "pad" {
					keep = append(keep, e)
				}
			}
			cm.ManagedFields = keep
			if err := patchConfigMap(t, editor, ns, name, round5PadEntry(t, cm, set)); err != nil && failed.Add(1) == 1 {
				t.Errorf("%s: %v", name, err)
			}
		})
		if failed.Load() > 0 {
			t.Fatalf("%d objects not padded", failed.Load())
		}
	}
	fc, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	fence := func(what string, epoch int64) {
		tok := holder.Acquire(t, ns, appLease, epoch)
		fctx, cancel := context.WithTimeout(ctx, elector.DefaultRenewDeadline)
		defer cancel()
		start := time.Now()
		err := fc.Raise(fctx, tok)
		took := time.Since(start)
		raised := 0
		for i := range n {
			if objectEpoch(t, ns, fmt.Sprintf("cm-%03d", i)) == fmt.Sprint(epoch) {
				raised++
			}
		}
		msg := ""
		if err != nil {
			msg = err.Error()
			if i := strings.Index(msg, "\n"); i > 0 {
				msg = msg[:i] + " ..."
			}
		}
		t.Logf("%s: the fence at epoch %d took %v; %d of %d holder-written ConfigMaps raised; error: %s", what, epoch, took, raised, n, msg)
		if err != nil || raised < n {
			t.Errorf("fence-on-acquire at the default PostAcquireTimeout (%v), %s: %d of %d holder-written objects raised (I3): %s",
				elector.DefaultRenewDeadline, what, raised, n, msg)
		}
	}
	pad(round5OneOwned(size - 60))
	fence(fmt.Sprintf("one entry owning one fictitious finalizer of %d bytes (control)", size-60), 2)
	pad(round5TinyOwned(most - 300))
	fence(fmt.Sprintf("one entry owning %d fictitious finalizers", most-300), 3)
}
