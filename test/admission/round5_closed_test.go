package admission_test

// Round 5 of the independent attacker: the attacks that worked against 71911ea, each closed since. Each
// test asserts the invariant it tried to break (it fails when the attack works).

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound5LeaseEntriesBlockTheFenceDeclaration: the Lease policy's count bound counts fencekit's own
// annotations and label with the others. A Lease acquired by an elector that fences nothing carries 3 (the
// label, the epoch, the acquirer); another elector-role user adds labels up to 64 in all. The next
// acquisition by an elector that declares fence-on-acquire adds the fences annotation (65): it must still
// go through (I2: nothing a non-holder writes may lock the holder out). Control: the same without padding.
func TestRound5LeaseEntriesBlockTheFenceDeclaration(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	first := newWorker(t, ns, "plain-operator")
	next := newWorker(t, ns, "app-operator")
	intruder := newWorker(t, ns, "intruder")
	for _, padded := range []bool{false, true} {
		lease := fmt.Sprintf("decl-%t", padded)
		first.Acquire(t, ns, lease, 1)
		if padded {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var l coordinationv1.Lease
				if err := intruder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
					return err
				}
				for i := len(l.Labels) + len(l.Annotations); i < 64; i++ {
					l.Labels[fmt.Sprintf("p%02d", i)] = ""
				}
				return intruder.Client.Update(ctx, &l)
			})
			if err != nil {
				t.Fatalf("the intruder's labels up to 64: %v", err)
			}
		}
		n := round5LeaseEntries(t, ns, lease)
		err := round5Acquire(t, next, ns, lease, 2, protocol.FencesFencedResources)
		t.Logf("padded=%t (%d labels and annotations): the acquisition that declares fence-on-acquire: %v", padded, n, err)
		if err != nil {
			t.Errorf("padded=%t: the acquisition at epoch 2 that declares fence-on-acquire, after another user's labels brought the Lease to %d entries (I2): %v", padded, n, err)
		}
	}
}

// TestRound5LeaseOverSixtyFourSkipsTheByteBound: the Lease policy checks the 252 KiB byte bound only while
// the Lease has at most 64 labels and annotations ("entries > 64 || freeBytes <= 258048 || ..."), and lets
// a Lease keep more than 64 if it had them. An existing unfenced Lease (a plain client-go Lease, set up by
// a user with RBAC on Leases) carries 70 labels and annotations when a fencekit elector acquires it. Once
// fenced, another user grows a value (not the count) until the annotations fill the apiserver's 256 KiB.
// The next acquisition, by a longer-named acquirer, must go through (I2).
func TestRound5LeaseOverSixtyFourSkipsTheByteBound(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "over"
	holder := newWorker(t, ns, "app-operator")
	next := newWorker(t, ns, "app-operator-with-a-longer-name")
	intruder := newWorker(t, ns, "intruder")
	pre := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease, Labels: map[string]string{}, Annotations: map[string]string{}}}
	for i := range 70 - 4 {
		pre.Labels[fmt.Sprintf("app.example.com/l%02d", i)] = "x"
	}
	pre.Labels[protocol.FencedLabel] = "false"
	pre.Annotations[protocol.EpochAnnotation] = "1"
	pre.Annotations[protocol.AcquirerAnnotation] = "nobody"
	pre.Annotations[protocol.FencesAnnotation] = ""
	if err := retryRBAC(t, "the unfenced Lease", func() error { return intruder.Client.Create(ctx, pre) }); err != nil {
		t.Fatal(err)
	}
	if err := round5Acquire(t, holder, ns, lease, 0, ""); err != nil {
		t.Fatalf("the elector's first acquisition of the unfenced Lease with 70 labels and annotations: %v", err)
	}
	l := env.ReadLease(t, ns, lease)
	t.Logf("fenced at epoch %s with %d labels and annotations", l.Annotations[protocol.EpochAnnotation], len(l.Labels)+len(l.Annotations))
	epoch, _ := strconv.ParseInt(l.Annotations[protocol.EpochAnnotation], 10, 64)
	fill := func(extra int) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var l coordinationv1.Lease
			if err := intruder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
				return err
			}
			l.Labels["app.example.com/l00"] = "x"
			total := 0
			for k, v := range l.Annotations {
				if k != "app.example.com/pad" {
					total += len(k) + len(v)
				}
			}
			// One label makes room for the annotation: the count stays at 70.
			delete(l.Labels, "app.example.com/l65")
			room := 256*1024 - total - len("app.example.com/pad") + extra
			l.Annotations["app.example.com/pad"] = strings.Repeat("x", room)
			return intruder.Client.Update(ctx, &l)
		})
	}
	err := fill(0)
	l = env.ReadLease(t, ns, lease)
	t.Logf("another user fills the annotations to 256 KiB, keeping %d labels and annotations: %v (other bytes now %d)", len(l.Labels)+len(l.Annotations), err, round4FreeLeaseBytes(l))
	if err == nil && round4FreeLeaseBytes(l) > round4LeaseBound {
		err = round5Acquire(t, next, ns, lease, epoch+1, "")
		if err != nil {
			t.Errorf("the next acquisition at epoch %d by a longer-named acquirer, after another user filled the fenced Lease's annotations past 252 KiB (I2): %v", epoch+1, err)
		}
	}
}

// TestRound5PodSubresourcesOfAPodBeingDeleted: a write with the token may not change the content of an
// object being deleted (it goes with the object once a user without the token removes its last
// finalizer). The rule skips every subresource but status as "foreign" (request.go: foreign()), and
// NewClient checks only "scale" before it writes: but pods/ephemeralcontainers and pods/resize carry the
// whole Pod, metadata included. The holder deletes its Pod, held by another user's free finalizer, then
// adds an ephemeral container and resizes it through NewClient; the other user removes its finalizer.
// The holder was told each write succeeded, and the Pod with them is gone ("nothing is lost").
func TestRound5PodSubresourcesOfAPodBeingDeleted(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/ephemeralcontainers",
		"pods/resize", "pods/status"}, Verbs: []string{"*"}}}, holder.User, "editor")
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	for _, name := range []string{"eph", "rs"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
		if err := retryRBAC(t, "the holder's pod", func() error { return fenced.Create(ctx, pod) }); err != nil {
			t.Fatal(err)
		}
		if err := retryRBAC(t, "the editor's finalizer", func() error {
			return editor.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)))
		}); err != nil {
			t.Fatalf("a free finalizer: %v", err)
		}
		t.Cleanup(func() {
			_ = env.Client.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		if err := fenced.Delete(ctx, testenv.Read[corev1.Pod](t, env.Client, ns, name)); err != nil {
			t.Fatalf("the holder's delete: %v", err)
		}
	}
	cur := testenv.Read[corev1.Pod](t, env.Client, ns, "eph")
	if cur.DeletionTimestamp == nil {
		t.Fatal("the Pod is not being deleted")
	}
	ctl := cur.DeepCopy()
	ctl.Labels = map[string]string{"x": "y"}
	t.Logf("control: the holder's update of a label on its Pod being deleted: %v", fenced.Update(ctx, ctl))
	eph := cur.DeepCopy()
	eph.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "busybox"}}}
	errEph := fenced.SubResource("ephemeralcontainers").Update(ctx, eph)
	t.Logf("the holder adds an ephemeral container to its Pod being deleted: %v", errEph)
	rs := testenv.Read[corev1.Pod](t, env.Client, ns, "rs")
	rs.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("200m")
	errRs := fenced.SubResource("resize").Update(ctx, rs)
	t.Logf("the holder resizes its Pod being deleted: %v", errRs)
	got, gotRs := testenv.Read[corev1.Pod](t, env.Client, ns, "eph"), testenv.Read[corev1.Pod](t, env.Client, ns, "rs")
	t.Logf("stored: %d ephemeral containers on eph; cpu request %s on rs", len(got.Spec.EphemeralContainers), gotRs.Spec.Containers[0].Resources.Requests.Cpu())
	for name, err := range map[string]error{"eph": errEph, "rs": errRs} {
		if err != nil {
			continue
		}
		if err := editor.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
			t.Logf("the editor's removal of its finalizer: %v", err)
		}
		testenv.Eventually(t, "the Pod is gone", func() (bool, string) {
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{})
			return apierrors.IsNotFound(err), testenv.ErrString(err)
		})
		t.Errorf("Pod %s: the holder's write with the token through a Pod subresource to its Pod being deleted was admitted, and went with the Pod when a user without the token removed its finalizer (nothing is lost)", name)
	}
}

// TestRound5StatusRouteChangesMetadataOfAnObjectBeingDeleted: the rule's check that a write with the token
// does not change the content of an object being deleted skips the status subresource. Through
// deployments/status the apiserver also takes metadata (Kubernetes 1.37 writes the Deployment controller's
// revision annotation there). The holder deletes its Deployment (held by another user's free finalizer),
// then writes its status with NewClient, the body carrying a changed label and annotation: if either is
// stored, it goes with the Deployment once the other user removes its finalizer ("nothing is lost").
func TestRound5StatusRouteChangesMetadataOfAnObjectBeingDeleted(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: map[string]string{"tier": "a"}},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	hc, read := deploymentHolder(t, dep, "editor")
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)))
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := hc.Delete(ctx, read()); err != nil {
		t.Fatal(err)
	}
	cur := read()
	cur.Labels["tier"] = "b"
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations["example.com/note"] = "written while being deleted"
	cur.Status.ObservedGeneration = cur.Generation
	err := hc.Status().Update(ctx, cur)
	got := read()
	t.Logf("the holder's status update carrying a label and an annotation, on its Deployment being deleted: %v (stored: tier=%q, note=%q, observedGeneration %d)",
		err, got.Labels["tier"], got.Annotations["example.com/note"], got.Status.ObservedGeneration)
	if err == nil && (got.Labels["tier"] == "b" || got.Annotations["example.com/note"] != "") {
		t.Errorf("the holder's write with the token through deployments/status changed the metadata of its Deployment being deleted (label tier=%q, annotation %q): it goes with the Deployment once another user removes its finalizer",
			got.Labels["tier"], got.Annotations["example.com/note"])
	}
}

// TestRound5StatusContentOfACustomResourceBeingDeleted: the rule's check that a write with the token does
// not change the content of an object being deleted skips every path under status. For a custom resource
// whose CRD has no status subresource, status is content like spec (written only with the token, through
// the object itself). The holder deletes its Gadget (held by another user's free finalizer), then updates
// its status with NewClient; if admitted, the write goes with the Gadget once the other user removes its
// finalizer ("nothing is lost"). Control: the same write to spec is refused.
func TestRound5StatusContentOfACustomResourceBeingDeleted(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets.round5.test.fencekit.io"},
		"spec": map[string]any{"group": "round5.test.fencekit.io", "scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
					"spec":   map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
					"status": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}},
	}}
	if err := env.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gadget := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("round5.test.fencekit.io/v1")
		u.SetKind("Gadget")
		u.SetNamespace(ns)
		u.SetName("g")
		return u
	}
	testenv.Eventually(t, "the Gadget CRD is served", func() (bool, string) {
		err := env.Client.List(ctx, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "round5.test.fencekit.io/v1", "kind": "GadgetList"}}, client.InNamespace(ns))
		return err == nil, testenv.ErrString(err)
	})
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "gadgets", []rbacv1.PolicyRule{{APIGroups: []string{"round5.test.fencekit.io"}, Resources: []string{"gadgets"}, Verbs: []string{"*"}}}, holder.User, "editor")
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Group: "round5.test.fencekit.io", Resource: "gadgets"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	g := gadget()
	g.Object["spec"] = map[string]any{"size": int64(1)}
	g.Object["status"] = map[string]any{"phase": "Running"}
	if err := retryRBAC(t, "the holder's gadget", func() error { return fenced.Create(ctx, g) }); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return editor.Patch(ctx, gadget(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)))
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(ctx, gadget(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	err := editor.Patch(ctx, gadget(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Editor"}}`)))
	t.Logf("a user without the token writes the Gadget's status (content: no status subresource): %.200v", err)
	read := func() *unstructured.Unstructured {
		u := gadget()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	if err := fenced.Delete(ctx, read()); err != nil {
		t.Fatal(err)
	}
	err = fenced.Patch(ctx, gadget(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":2}}`)))
	t.Logf("control: the holder's spec write to its Gadget being deleted: %.200v", err)
	err = fenced.Patch(ctx, gadget(), client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Draining"}}`)))
	phase, _, _ := unstructured.NestedString(read().Object, "status", "phase")
	t.Logf("the holder's status write to its Gadget being deleted: %v (status.phase now %q)", err, phase)
	if err == nil && phase == "Draining" {
		if err := editor.Patch(ctx, gadget(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
			t.Logf("the editor's removal of its finalizer: %v", err)
		}
		testenv.Eventually(t, "the Gadget is gone", func() (bool, string) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(gadget()), gadget())
			return apierrors.IsNotFound(err), testenv.ErrString(err)
		})
		t.Errorf("the holder's write with the token of its Gadget's status (content: no status subresource) was admitted on the Gadget being deleted, and went with it when a user without the token removed its finalizer (nothing is lost)")
	}
}

// TestRound5BindingCarriesAnnotations: a Pod's Binding is free for the cluster's controllers (allowlist.md:
// "it assigns a node and nothing else"), and the rule decides it on the Binding object, not the Pod. But
// the apiserver copies a Binding's metadata.annotations onto the Pod it binds. kube-scheduler's identity,
// and a kubelet's (group system:nodes), each bind one of the holder's unbound Pods with a Binding carrying
// an annotation of its own and fencekit's epoch record and deletion marker: the Pod's annotations are
// fenced content (I1), and fencekit's own say at which epoch it was written and that the holder is
// deleting it.
func TestRound5BindingCarriesAnnotations(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/binding", "bindings"}, Verbs: []string{"*"}}},
		holder.User, "system:kube-scheduler", "system:node:n1")
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	for _, c := range []struct {
		name, user string
		groups     []string
	}{{"p-scheduler", "system:kube-scheduler", nil}, {"p-kubelet", "system:node:n1", []string{"system:nodes"}}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name, Annotations: map[string]string{"example.com/owner": "holder"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
		if err := retryRBAC(t, "the holder's pod", func() error { return fenced.Create(ctx, pod) }); err != nil {
			t.Fatal(err)
		}
		binder := env.ClientAs(t, c.user, c.groups...)
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name, Annotations: map[string]string{
			"example.com/owner": c.user, fencingv1alpha1.ObjectEpochAnnotation: "999", fencingv1alpha1.DeleteAtEpochAnnotation: "1"}},
			Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
		err := retryRBAC(t, c.user+"'s binding", func() error {
			return binder.SubResource("binding").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}}, binding)
		})
		got := testenv.Read[corev1.Pod](t, env.Client, ns, c.name)
		t.Logf("%s's Binding with annotations: %v; the Pod: node %q, annotations %v", c.user, err, got.Spec.NodeName, got.Annotations)
		if got.Annotations["example.com/owner"] != "holder" || got.Annotations[fencingv1alpha1.ObjectEpochAnnotation] != "1" ||
			got.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation] != "" {
			t.Errorf("%s: a Binding without the token changed the fenced Pod's annotations: %v (I1)", c.user, got.Annotations)
		}
		err = fenced.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"v":"2"}}}`)))
		t.Logf("the holder's next write to its Pod: %v", err)
		if err != nil {
			t.Errorf("the holder's next write to its Pod after %s's Binding (I2): %v", c.user, err)
		}
	}
}

// TestRound5BindingFillsTheAnnotations: the bound on annotations of writes without the token
// (MaxFreeAnnotationBytes, 252 KiB, leaving 4 KiB for fencekit's own) is measured on the Binding, not on
// the Pod the apiserver copies its annotations onto. The holder's unbound Pod carries 4 KiB of annotations
// of its own (as kubectl's last-applied-configuration does); kube-scheduler's identity binds it with a
// Binding whose annotations stay within 252 KiB, so that the Pod's reach the apiserver's 256 KiB less a
// few bytes. The holder's next write, its delete (which first writes the deletion marker), must go
// through (I2).
func TestRound5BindingFillsTheAnnotations(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/binding"}, Verbs: []string{"*"}}},
		holder.User, "system:kube-scheduler")
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Annotations: map[string]string{"example.com/config": strings.Repeat("c", 4096)}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if err := retryRBAC(t, "the holder's pod", func() error { return fenced.Create(ctx, pod) }); err != nil {
		t.Fatal(err)
	}
	have := 0
	for k, v := range testenv.Read[corev1.Pod](t, env.Client, ns, "p").Annotations {
		have += len(k) + len(v)
	}
	const key = "example.com/pad"
	room := 256*1024 - have - len(key) - 4
	sc := env.ClientAs(t, "system:kube-scheduler")
	binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Annotations: map[string]string{key: strings.Repeat("x", room)}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	err := retryRBAC(t, "the scheduler's binding", func() error {
		return sc.SubResource("binding").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}, binding)
	})
	got := testenv.Read[corev1.Pod](t, env.Client, ns, "p")
	total := 0
	for k, v := range got.Annotations {
		total += len(k) + len(v)
	}
	t.Logf("kube-scheduler's Binding with %d bytes of annotations: %v; the Pod's annotations are now %d bytes", room+len(key), err, total)
	err = fenced.Delete(ctx, got)
	t.Logf("the holder's delete: %.300v", err)
	if err != nil {
		t.Errorf("the holder's delete of its Pod after kube-scheduler's Binding filled its annotations (I2): %.300v", err)
	}
}

// round5LeaseEntries is the number of labels and annotations of the Lease ns/name.
func round5LeaseEntries(t *testing.T, ns, name string) int {
	l := env.ReadLease(t, ns, name)
	return len(l.Labels) + len(l.Annotations)
}

// round5Acquire acquires ns/name for w at epoch (the stored epoch plus one, or the seed from the
// resourceVersion when epoch is 0), declaring fences, and returns the error.
func round5Acquire(t *testing.T, w worker, ns, name string, epoch int64, fences string) error {
	t.Helper()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur coordinationv1.Lease
		if err := w.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &cur); err != nil {
			return err
		}
		e := epoch
		if e == 0 {
			e, _ = strconv.ParseInt(cur.ResourceVersion, 10, 64)
		}
		testenv.AcquiredBy(&cur, w.User, w.Holder, e, 15*time.Second)
		if fences != "" {
			cur.Annotations[protocol.FencesAnnotation] = fences
		}
		return w.Client.Update(t.Context(), &cur, testenv.Presenting(e))
	})
}

// round5Conditions is a status patch with n Pod conditions of 6-character types.
func round5Conditions(t *testing.T, n int) string {
	conds := make([]map[string]any, n)
	for i := range conds {
		conds[i] = map[string]any{"type": fmt.Sprintf("c%05d", i), "status": "True"}
	}
	return string(mustJSON(t, map[string]any{"status": map[string]any{"conditions": conds}}))
}

// TestRound5KubeletPadsItsPodsStatus: a kubelet (a compromised node, or any credential in system:nodes;
// NodeRestriction lets it write the status of the Pods bound to its node) pads the status of each of 60
// holder-written Pods on its node: with thousands of tiny conditions, or one condition carrying a message
// of about 480 KiB. The cluster's controllers are held to MaxFreePartEntries and MaxFreePartBytes plus their
// allowance (MaxNodePartEntries, MaxNodePartBytes; the elements of status's lists count as entries): both are refused, naming the bound. Then each Pod is padded as far as the bounds let in, and the fence at the default
// PostAcquireTimeout raises every holder-written Pod (I3: the time of an acquisition may not grow with
// what non-holders write).
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
	// A write whose webhook call timed out (a loaded machine: thousands of conditions to decide) was not
	// decided: it is sent again, up to three times in all, for the decision's own message.
	status := func(name, patch string) error {
		for try := 1; ; try++ {
			err := kc.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, client.RawPatch(types.MergePatchType, []byte(patch)))
			if err == nil || try == 3 || !strings.Contains(err.Error(), "failed calling webhook") {
				return err
			}
			t.Logf("the kubelet's status write of %s, try %d: %v; sending it again", name, try, err)
		}
	}
	longMessage := func(size int) string {
		return string(mustJSON(t, map[string]any{"status": map[string]any{"conditions": []map[string]any{{"type": "c00000", "status": "True",
			"message": strings.Repeat("m", size)}}}}))
	}
	// What the earlier rule let in is refused now, with the bound named.
	_ = retryRBAC(t, "the kubelet's status", func() error {
		err := status("p-000", round5Conditions(t, 2550))
		if err != nil && !strings.Contains(err.Error(), "over the bound") {
			return err
		}
		return nil
	})
	const bytesBound, entriesBound = admission.MaxFreePartBytes + admission.MaxNodePartBytes, admission.MaxFreePartEntries + admission.MaxNodePartEntries
	if err := status("p-000", round5Conditions(t, 2550)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("over the bound of %d bytes", bytesBound)) {
		t.Errorf("the kubelet's 2550 tiny conditions: %.300v, want a refusal naming the bound of %d bytes", err, bytesBound)
	}
	if err := status("p-000", round5Conditions(t, entriesBound+1)); err == nil || !strings.Contains(err.Error(), "over the bound of") {
		t.Errorf("the kubelet's %d tiny conditions: %.300v, want a refusal naming a bound", entriesBound+1, err)
	}
	if err := status("p-000", longMessage(480*1024)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("over the bound of %d bytes", bytesBound)) {
		t.Errorf("the kubelet's condition of a 480 KiB message: %.300v, want a refusal naming the bound of %d bytes", err, bytesBound)
	}
	// The most each bound lets in.
	most := func(what string, patch func(k int) string, from, step int) string {
		for k := from; k > 0; k -= step {
			if err := status("p-000", patch(k)); err == nil {
				t.Logf("%s: %d admitted", what, k)
				return patch(k)
			}
		}
		t.Fatalf("%s: nothing admitted", what)
		return ""
	}
	tiny := most("tiny conditions", func(k int) string { return round5Conditions(t, k) }, entriesBound, 4)
	long := most("message bytes", longMessage, bytesBound, 1024)
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
		t.Logf("%s: the fence at epoch %d took %v; %d of %d holder-written Pods raised; error: %v", what, epoch, took, raised, n, err)
		if err != nil || raised < n {
			t.Errorf("fence-on-acquire at the default PostAcquireTimeout (%v), %s: %d of %d holder-written Pods raised (I3): %.300v",
				elector.DefaultRenewDeadline, what, raised, n, err)
		}
	}
	pad(`{"status":{"conditions":[{"type":"Ready","status":"True"}]}}`)
	fence("each Pod's status with one condition (control)", 2)
	pad(long)
	fence("each Pod's status padded by the kubelet with one condition of the longest message the bound lets in", 3)
	pad(tiny)
	fence("each Pod's status padded by the kubelet with as many tiny conditions as the bound lets in", 4)
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
	// The holder's acquisitions and writes at client-go's default limits spread its twelve epochs over
	// seconds, as terms follow each other; within one second the apiserver orders entries by name, which
	// is another case (decision 0050).
	holder.Client = limited(t, holder)
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
		// Each write kind in turn: an update of the Scale, a JSON merge patch, a JSON patch.
		scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
		target := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		var err error
		switch i % 3 {
		case 0:
			err = fenced.SubResource("scale").Update(ctx, target, client.WithSubResourceBody(scale))
		case 1:
			err = fenced.SubResource("scale").Patch(ctx, target, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":5}}`)), client.WithSubResourceBody(scale))
		default:
			err = fenced.SubResource("scale").Patch(ctx, target, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":5}]`)), client.WithSubResourceBody(scale))
		}
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

// round5PadEntry is a merge patch that keeps cm's managedFields and adds one entry of another manager
// owning fields set.
func round5PadEntry(t *testing.T, cm *corev1.ConfigMap, set map[string]any) string {
	t.Helper()
	mf := append([]metav1.ManagedFieldsEntry(nil), cm.ManagedFields...)
	mf = append(mf, metav1.ManagedFieldsEntry{Manager: "pad", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Now()}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(mustJSON(t, set)))})
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
	v := strconv.Quote(strings.Repeat("p", size))
	return map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{"v:" + v: map[string]any{}}}}
}

// TestRound5FictitiousOwnedFieldsSlowTheObjectFence: a user without the token sends metadata.managedFields
// itself, adding one entry that owns thousands of finalizers the object does not have ("v:0", "v:1", ...:
// about 11 bytes each, within 64 KiB). The apiserver keeps what a write sends there, and every later write
// of the object, fence-on-acquire's raise too, works through every field listed: padded so, 150
// holder-written ConfigMaps took the fence twice the time of the same bytes in one field (3.8 s against
// 7.9 s), past PostAcquireTimeout under load (I3). No entry may gain a field the object does not have:
// the thousands and the one are refused, naming the field; an entry owning a finalizer the object has is
// admitted (control).
func TestRound5FictitiousOwnedFieldsSlowTheObjectFence(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return patchConfigMap(t, editor, ns, "probe", `{"metadata":{"finalizers":["example.com/x"]}}`)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, "probe", `{"metadata":{"finalizers":null}}`) })
	for what, set := range map[string]map[string]any{
		"5000 fictitious finalizers":            round5TinyOwned(5000),
		"one fictitious finalizer of 100 bytes": round5OneOwned(100),
	} {
		cm := readConfigMap(t, ns, "probe")
		err := patchConfigMap(t, editor, ns, "probe", round5PadEntry(t, cm, set))
		t.Logf("an entry owning %s: %.300v", what, err)
		if err == nil || !strings.Contains(err.Error(), "a field the object does not have") {
			t.Errorf("an editor's managedFields entry owning %s: %.300v, want a refusal naming a field the object does not have", what, err)
		}
		for _, e := range readConfigMap(t, ns, "probe").ManagedFields {
			if e.Manager == "pad" {
				t.Errorf("after the entry owning %s, the stored object has an entry of manager pad: %s", what, e.FieldsV1.GetRawString())
			}
		}
	}
	cm := readConfigMap(t, ns, "probe")
	if err := patchConfigMap(t, editor, ns, "probe", round5PadEntry(t, cm,
		map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{`v:"example.com/x"`: map[string]any{}}}})); err != nil {
		t.Errorf("an editor's entry owning the finalizer the object has (control): %v", err)
	}
}
