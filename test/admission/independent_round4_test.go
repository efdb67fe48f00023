package admission_test

// Round 4 of the independent attacker: the attacks on the changes of this round that the code withstood.
// Each test asserts the invariant it tried to break (it fails when the attack works). The attacks that
// worked, closed since, are in round4_closed_test.go.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round4LeaseBound is the Lease policy's bound on a fenced Lease's labels and annotations other than
// fencekit's epoch, acquirer and fences (bytes of keys and values).
const round4LeaseBound = 258048

// round4FreeLeaseBytes counts l's labels and annotations as the Lease policy does.
func round4FreeLeaseBytes(l *coordinationv1.Lease) int {
	n := 0
	for k, v := range l.Annotations {
		switch k {
		case "fencing.fencekit.io/epoch", "fencing.fencekit.io/acquirer", "fencing.fencekit.io/fences":
			continue
		}
		n += len(k) + len(v)
	}
	for k, v := range l.Labels {
		n += len(k) + len(v)
	}
	return n
}

// TestRound4LeaseMultiByteAtTheBound: another user with the elector role (update on leases) fills a
// fenced Lease's other annotations with multi-byte UTF-8 (3 bytes a character: a count in characters would
// let in three times as much) and labels, exactly to the Lease policy's bound, then one byte past it.
// The holder's next acquisition (epoch 9 to 10, a longer epoch) by another, longer-named acquirer, and
// its renewal, must still go through (I2).
func TestRound4LeaseMultiByteAtTheBound(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "mb"
	first := newWorker(t, ns, "app-operator")
	next := newWorker(t, ns, "app-operator-with-a-much-longer-name-"+strings.Repeat("n", 150))
	intruder := newWorker(t, ns, "intruder")
	first.Acquire(t, ns, lease, 9)
	fill := func(extra int) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var l coordinationv1.Lease
			if err := intruder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
				return err
			}
			delete(l.Annotations, "example.com/pad")
			l.Labels["example.com/l"] = strings.Repeat("v", 63)
			have := round4FreeLeaseBytes(&l)
			room := round4LeaseBound - have - len("example.com/pad") + extra
			v := strings.Repeat("€", room/3) + strings.Repeat("x", room%3) // € is 3 bytes
			l.Annotations["example.com/pad"] = v
			return intruder.Client.Update(ctx, &l)
		})
	}
	err := fill(1)
	mustContain(t, "another elector-role user fills the Lease one byte past the bound, in 3-byte characters", err, nil, "over the bound of 258048")
	if err := fill(0); err != nil {
		t.Fatalf("another elector-role user fills the Lease exactly to the bound: %v", err)
	}
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
		t.Fatal(err)
	}
	t.Logf("the Lease's other labels and annotations: %d bytes (%d characters in the pad)", round4FreeLeaseBytes(&l), len([]rune(l.Annotations["example.com/pad"])))
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur coordinationv1.Lease
		if err := next.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &cur); err != nil {
			return err
		}
		testenv.AcquiredBy(&cur, next.User, next.Holder, 10, 15*time.Second)
		return next.Client.Update(ctx, &cur, testenv.Presenting(10))
	})
	if err != nil {
		t.Errorf("the next acquisition at epoch 10, by a longer-named acquirer, after the Lease was filled to the bound (I2): %v", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur coordinationv1.Lease
		if err := next.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &cur); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		cur.Spec.RenewTime = &now
		return next.Client.Update(ctx, &cur, testenv.Presenting(10))
	})
	if err != nil {
		t.Errorf("the holder's renewal after the Lease was filled to the bound (I2): %v", err)
	}
}

// TestRound4StatusRouteRewritesOwnership: the FencedResource webhook now matches fencedresources/status,
// where a write without the token is free for status.*. A user with RBAC on fencedresources/status only
// sends status updates whose body carries metadata.managedFields with the holder's entry renamed to
// another manager, and then cleared ([{}]): had either landed, the holder's next server-side apply would
// no longer own (or would prune) its data (I1 ownership). Observed: both are admitted, and the holder's
// entry stays as it was (the apiserver does not take managedFields from a status update's body).
func TestRound4StatusRouteRewritesOwnership(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User)
	env.Grant(t, ns, "fr-status", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources/status"}, Verbs: []string{"get", "patch", "update"}}}, "status-writer")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "target", "l")
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	sw := env.ClientAs(t, "status-writer")
	before := get(t, key).ManagedFields
	moved := get(t, key)
	for i := range moved.ManagedFields {
		if strings.HasPrefix(moved.ManagedFields[i].Manager, "fencing.fencekit.io/epoch=") {
			moved.ManagedFields[i].Manager = "status-writer"
		}
	}
	moved.Status.Holder = "x"
	err := retryRBAC(t, "the status writer's update", func() error { return sw.Status().Update(ctx, moved) })
	t.Logf("a status update that renames the holder's managedFields entry: %v", err)
	cleared := get(t, key)
	cleared.ManagedFields = []metav1.ManagedFieldsEntry{{}}
	cleared.Status.Holder = "y"
	t.Logf("a status update that clears managedFields: %v", sw.Status().Update(ctx, cleared))
	epochEntry := func(es []metav1.ManagedFieldsEntry) string {
		for _, e := range es {
			if strings.HasPrefix(e.Manager, "fencing.fencekit.io/epoch=") && e.Subresource == "" {
				return e.Manager + " " + string(e.Operation) + " " + e.FieldsV1.GetRawString()
			}
		}
		return "none"
	}
	after := get(t, key).ManagedFields
	for _, e := range after {
		t.Logf("managedFields entry after the attacks: %s %s %q %s", e.Manager, e.Operation, e.Subresource, e.FieldsV1.GetRawString())
	}
	if b, a := epochEntry(before), epochEntry(after); a != b {
		t.Errorf("the holder's managedFields entry changed by status writes without the token (I1 ownership):\nbefore %s\nafter  %s", b, a)
	}
}

// TestRound4StatusPastThePartBound: a FencedResource's status is free without the token, bounded with the
// metadata by MaxFreePartBytes (64 KiB). A user with RBAC on fencedresources/status writes three
// conditions of 30,000-character messages (the CRD allows eight of 32 KiB): refused; the holder's
// Writer.Set then goes through.
func TestRound4StatusPastThePartBound(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User)
	env.Grant(t, ns, "fr-status", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources/status"}, Verbs: []string{"get", "patch", "update"}}}, "status-writer")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "target", "l")
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	sw := env.ClientAs(t, "status-writer")
	now := metav1.Now()
	// On the status as last read: the operator writes the resource's status too, and an update that lost
	// the race to it is a conflict, not a decision.
	err := retryRBAC(t, "the status writer's update", func() error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			fr := get(t, key)
			for i := range 3 {
				fr.Status.Conditions = append(fr.Status.Conditions, metav1.Condition{Type: fmt.Sprintf("example.com/Pad%d", i), Status: metav1.ConditionTrue,
					Reason: "Pad", Message: strings.Repeat("m", 30000), LastTransitionTime: now})
			}
			return sw.Status().Update(ctx, fr)
		})
	})
	mustContain(t, "a status write without the token of about 90 KB", err, nil, "over the bound of 65536")
	if _, err := w.Set(ctx, tok, key, map[string]any{"v": 2}); err != nil {
		t.Errorf("the holder's Writer.Set after the status attack (I2): %v", err)
	}
}

// TestRound4OnlyPodDeletersDeleteCoveredPods: only kube-controller-manager's named ServiceAccounts count
// as cluster controllers, and only the Pod-deleting ones may delete a covered Pod without the token. Each
// of an add-on's kube-system ServiceAccount, a kube-system ServiceAccount named like a controller that
// does not delete Pods (deployment-controller, horizontal-pod-autoscaler), the same name in another
// namespace, and a name that only starts like one (replicaset-controller-x) deletes a fenced Pod: refused
// (I1). The replicaset controller's is admitted for a Pod a ReplicaSet controls (control), refused for the
// standalone one.
func TestRound4OnlyPodDeletersDeleteCoveredPods(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	users := []string{"system:serviceaccount:kube-system:some-addon", "system:serviceaccount:kube-system:deployment-controller",
		"system:serviceaccount:kube-system:horizontal-pod-autoscaler", "system:serviceaccount:" + ns + ":replicaset-controller",
		"system:serviceaccount:kube-system:replicaset-controller-x", "system:serviceaccount:kube-system:replicaset-controller"}
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}}}, append([]string{holder.User}, users...)...)
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	holder.LeaseDuration = 10 * time.Minute
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's pod", func() error {
		return fenced.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}})
	}); err != nil {
		t.Fatal(err)
	}
	for _, u := range users[:len(users)-1] {
		c := env.ClientAs(t, u)
		err := retryRBAC(t, u+"'s delete", func() error {
			return c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}, client.DryRunAll)
		})
		mustContain(t, u+" deletes a fenced Pod (dry run)", err, fencing.IsNotHolder)
	}
	// The ReplicaSet controller itself deletes only the Pods a ReplicaSet controls (decision 0050): the
	// holder's standalone Pod is refused, one the holder created under a ReplicaSet admitted (control).
	if err := fenced.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "q", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}); err != nil {
		t.Fatal(err)
	}
	c := env.ClientAs(t, users[len(users)-1])
	err := retryRBAC(t, "the replicaset controller's delete", func() error {
		return c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "q"}}, client.DryRunAll)
	})
	if err != nil {
		t.Errorf("the replicaset controller deletes a fenced Pod its ReplicaSet controls (dry run, control): %v", err)
	}
	mustContain(t, "the replicaset controller deletes the holder's standalone Pod (dry run)",
		c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}, client.DryRunAll), fencing.IsNotHolder)
}

// TestRound4StatusWaitsForTheHold: a FencedResource's status is free without the token, but waits while
// the holder's hold (fencing.fencekit.io/hold-at-epoch) is the Lease's current epoch: a user with RBAC on
// fencedresources/status only writes status in a loop and must not fail the holder's compare-and-swap.
// With the hold armed, the status write (update, merge patch, server-side apply, dry run) is refused; the
// holder's Update with the resourceVersion it read then goes through (I2).
func TestRound4StatusWaitsForTheHold(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User)
	env.Grant(t, ns, "fr-status", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources/status"}, Verbs: []string{"get", "patch", "update"}}}, "status-writer")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "target", "l")
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	sw := env.ClientAs(t, "status-writer")
	if err := retryRBAC(t, "the status writer's patch", func() error {
		return sw.Status().Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"holder":"a"}}`)))
	}); err != nil {
		t.Fatalf("a free status write before the hold (control): %v", err)
	}
	// The hold, as the fenced clients arm it after losing a compare-and-swap: with the token.
	if err := mergePatch(t, holder.Client, key, `{"metadata":{"annotations":{"fencing.fencekit.io/hold-at-epoch":"1"}}}`, testenv.Presenting(1)); err != nil {
		t.Fatalf("the holder arms its hold: %v", err)
	}
	read := get(t, key)
	writes := map[string]func() error{
		"update": func() error {
			u := read.DeepCopy()
			u.Status.Holder = "b"
			return sw.Status().Update(ctx, u)
		},
		"merge patch": func() error {
			return sw.Status().Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
				client.RawPatch(types.MergePatchType, []byte(`{"status":{"holder":"c"}}`)))
		},
		"server-side apply": func() error {
			u := &fencingv1alpha1.FencedResource{TypeMeta: metav1.TypeMeta{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedResource"},
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "l"},
				Status: fencingv1alpha1.FencedResourceStatus{Holder: "d"}}
			return sw.Status().Patch(ctx, u, client.RawPatch(types.ApplyPatchType, mustJSON(t, u)), client.FieldOwner("dashboard"), client.ForceOwnership)
		},
		"dry-run merge patch": func() error {
			return sw.Status().Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
				client.RawPatch(types.MergePatchType, []byte(`{"status":{"holder":"e"}}`)), client.DryRunAll)
		},
	}
	for what, write := range writes {
		mustContain(t, "a status "+what+" without the token while the hold is armed", write(), fencing.IsTokenMissing, "hold-at-epoch")
	}
	if got := get(t, key); got.ResourceVersion != read.ResourceVersion {
		t.Errorf("the resource changed under the holder's hold: resourceVersion %s, was %s (status holder %q)", got.ResourceVersion, read.ResourceVersion, got.Status.Holder)
	}
	if _, err := w.Update(ctx, tok, key, func(d map[string]any) error { d["v"] = 2; return nil }); err != nil {
		t.Errorf("the holder's Writer.Update after the hold (I2): %v", err)
	}
}

// TestRound4LeaseManySmallLabels: the Lease policy's bound is evaluated by CEL over every label and
// annotation (filter, map, bytes, sum), and CEL's runtime cost is bounded per expression. Another user with
// the elector role adds many empty labels of short keys to the holder's fenced Lease: 65 (one over the
// count bound) and 30,000 (about 116 KB) must be refused by the policy's count bound, and the holder's next
// acquisition and renewal go through. (45,000 labels, measured once: the apiserver's request timed out
// evaluating the policy, also not admitted; not repeated here, it costs the apiserver most of a minute.)
func TestRound4LeaseManySmallLabels(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "many"
	holder := newWorker(t, ns, "app-operator")
	intruder := newWorker(t, ns, "intruder")
	holder.Acquire(t, ns, lease, 1)
	for _, n := range []int{65, 30000} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var l coordinationv1.Lease
			if err := intruder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
				return err
			}
			for i := range n {
				l.Labels[fmt.Sprintf("%x", i)] = ""
			}
			return intruder.Client.Update(ctx, &l)
		})
		testenv.WantPolicy(t, err, fmt.Sprintf("fenced lease %s: this write grows its labels and annotations other than fencekit ones from 0 to %d, over the bound of 64", lease, n))
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur coordinationv1.Lease
		if err := holder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &cur); err != nil {
			return err
		}
		testenv.AcquiredBy(&cur, holder.User, holder.Holder, 2, 15*time.Second)
		return holder.Client.Update(ctx, &cur, testenv.Presenting(2))
	})
	if err != nil {
		t.Errorf("the holder's acquisition at epoch 2 after the refused label writes (I2): %v", err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur coordinationv1.Lease
		if err := holder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &cur); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		cur.Spec.RenewTime = &now
		return holder.Client.Update(ctx, &cur, testenv.Presenting(2))
	})
	if err != nil {
		t.Errorf("the holder's renewal after the refused label writes (I2): %v", err)
	}
}

// TestRound4RaiseOfObjectsBeingDeleted: a write with the token may not change the content of an object
// being deleted, but fence-on-acquire must still raise it. A user without the token holds a FencedResource
// and a ConfigMap the holder wrote and then deleted (free finalizers); the next acquisition's
// FenceOnAcquire and FenceObjectsOnAcquire must raise both (I2, I3), and the holder's Writer.Delete of
// the resource being deleted returns without error.
func TestRound4RaiseOfObjectsBeingDeleted(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects, holder.Fences.FencedResources = true, true
	grantFencedResources(t, ns, holder.User, "editor")
	env.Grant(t, ns, "holder-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"list"}}}, holder.User)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	key := declare(t, ns, "fr", appLease)
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return patchConfigMap(t, editor, ns, "cm", `{"metadata":{"finalizers":["example.com/hold"]}}`)
	}); err != nil {
		t.Fatal(err)
	}
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return mergePatch(t, editor, key, `{"metadata":{"finalizers":["example.com/hold"]}}`)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = patchConfigMap(t, env.Client, ns, "cm", `{"metadata":{"finalizers":null}}`)
		_ = mergePatch(t, env.Client, key, `{"metadata":{"finalizers":null}}`)
	})
	if err := fenced.Delete(ctx, readConfigMap(t, ns, "cm")); err != nil {
		t.Fatalf("the holder's delete of the ConfigMap: %v", err)
	}
	if err := w.Delete(ctx, tok, key); err != nil {
		t.Fatalf("the holder's Writer.Delete: %v", err)
	}
	if err := w.Delete(ctx, tok, key); err != nil {
		t.Errorf("the holder's second Writer.Delete of the resource being deleted: %v", err)
	}
	tok2 := holder.Acquire(t, ns, appLease, 2)
	fr, err := fencing.FenceOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	fo, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := fr.Raise(ctx, tok2); err != nil {
		t.Errorf("FenceOnAcquire with a resource being deleted (I3): %v", err)
	}
	if err := fo.Raise(ctx, tok2); err != nil {
		t.Errorf("FenceObjectsOnAcquire with a ConfigMap being deleted (I3): %v", err)
	}
	if got := get(t, key); got.Spec.Epoch != 2 || got.DeletionTimestamp == nil {
		t.Errorf("the resource being deleted after the fence: epoch %d, deletionTimestamp %v", got.Spec.Epoch, got.DeletionTimestamp)
	}
	if got := objectEpoch(t, ns, "cm"); got != "2" {
		t.Errorf("the ConfigMap being deleted after the fence: epoch record %q, want 2", got)
	}
}
