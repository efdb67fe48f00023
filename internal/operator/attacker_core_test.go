package operator_test

import (
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
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/admission"
	"github.com/fencekit/fencekit/internal/testenv"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// An independent attacker's review of the admission core (internal/admission and its webhook adapters),
// on the real apiserver. Each subtest says what it tries and that the check holds.

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

	// HOLDS: a user with RBAC on FencingPolicies only declares a policy that covers Leases. Were it
	// admitted, every Lease write would go through the object webhook too, and the epoch record of the
	// policy's objects is the Lease's own epoch annotation: the next acquisition would present epoch 2 while
	// the Lease is at 1 ("never issued"), and nobody could acquire the Lease again. The policy is refused.
	t.Run("a policy that covers Leases", func(t *testing.T) {
		a.s.set(false)
		ns := env.Namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Acquire(t, ns, "l", 1)
		env.Grant(t, ns, "policy-writer", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencingpolicies"},
			Verbs: []string{"*"}}}, "gitops")
		gitops := userClient(t, "gitops")
		p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leases"},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{{Group: "coordination.k8s.io", Resource: "leases"}}}}
		var err error
		eventually(t, "the policy write is decided (RBAC granted)", func() (bool, string) {
			err = gitops.Create(ctx, p)
			return err == nil || !isForbiddenByRBAC(err), errString(err)
		})
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
		a.s.set(false)
		ns := env.Namespace(t)
		holder := newWorker(t, ns, "app-operator")
		grantObjects(t, ns, holder.User, "editor")
		declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
		tok := holder.Acquire(t, ns, appLease, 1)
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
			var err error
			eventually(t, name+" is decided (RBAC granted)", func() (bool, string) {
				err = write()
				return err == nil || !isForbiddenByRBAC(err), errString(err)
			})
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
		a.s.set(false)
		ns := env.Namespace(t)
		holder := newWorker(t, ns, "app-operator")
		grantObjects(t, ns, holder.User, admission.GarbageCollectorUser, admission.NamespaceControllerUser)
		declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
		tok := holder.Acquire(t, ns, appLease, 1)
		if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
			Data: map[string]string{"v": "holder"}}); err != nil {
			t.Fatal(err)
		}
		gc := userClient(t, admission.GarbageCollectorUser)
		owner := `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":"00000000-0000-0000-0000-000000000001"}]}}`
		var err error
		eventually(t, "the GC's write is decided (RBAC granted)", func() (bool, string) {
			err = patchConfigMap(t, gc, ns, "app", owner)
			return err == nil || !isForbiddenByRBAC(err), errString(err)
		})
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
		a.s.set(false)
		ns := env.Namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Fences, r2.Fences = objects, objects
		grantObjects(t, ns, r1.User)
		grantPolicies(t, ns, r1.User)
		for _, v := range []string{"a", "b"} {
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: v},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps",
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}}}}}
			if err := env.Client.Create(ctx, p); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the webhook refuses an unfenced write of a ConfigMap labelled app="+v, func() (bool, string) {
				probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{"app": v}}}
				err := env.Client.Create(ctx, probe, client.DryRunAll)
				return fencing.IsTokenMissing(err), errString(err)
			})
		}
		t1 := r1.Acquire(t, ns, "l", 1)
		c1 := fencing.NewClient(r1.Client, tokenOf(t1))
		eventually(t, "replica-1 creates the ConfigMap (RBAC granted)", func() (bool, string) {
			err := c1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "m", Labels: map[string]string{"app": "a"}}})
			return err == nil, errString(err)
		})
		a.seen(t, ns, "l", 1, r1.Holder)
		onCopy(t, "objects", "replica-1's write at epoch 1", func() error { return patchConfigMap(t, c1, ns, "m", `{"data":{"v":"one"}}`) })

		a.s.set(true)
		t2 := r2.Acquire(t, ns, "l", 2)
		if err := fencing.FenceObjectsOnAcquire(r2.Client, r2.Client)(ctx, t2); err != nil {
			t.Fatal(err)
		}
		mustContain(t, "replica-1 moves the ConfigMap to policy b at epoch 1, the copy stalled",
			patchConfigMap(t, c1, ns, "m", `{"metadata":{"labels":{"app":"b"}},"data":{"v":"late"}}`), fencing.IsStale, "stale epoch 1")
		a.s.set(false)
		if got := readConfigMap(t, ns, "m"); got.Labels["app"] != "a" || got.Data["v"] != "one" {
			t.Errorf("the ConfigMap is %v %v after the stale write, want app=a, v=one", got.Labels, got.Data)
		}
	})
}
