package operator_test

import (
	"strconv"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// Attacks on the per-resource controller exemptions, the delete precondition and the kube-root-ca.crt
// exclusion, on the real apiserver. Each subtest says what it tries and which check stops it.

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

// retryRBAC runs write until RBAC has taken effect, and returns its result.
func retryRBAC(t *testing.T, what string, write func() error) error {
	t.Helper()
	var err error
	testenv.Eventually(t, what+" is decided (RBAC granted)", func() (bool, string) {
		err = write()
		return err == nil || !isForbiddenByRBAC(err), errString(err)
	})
	return err
}

// patchDecided merge-patches obj as c once RBAC lets c patch it (see retryRBAC), and returns the decision.
func patchDecided(t *testing.T, what string, c client.Client, obj client.Object, patch string) error {
	t.Helper()
	return retryRBAC(t, what, func() error { return c.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))) })
}

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
				retryRBAC(t, "a claim create", func() error { return userClient(t, u).Create(ctx, c) }), fencing.IsTokenMissing)
		}
	})

	// The token controller's exemption must not take every kubernetes.io/service-account.* annotation:
	// the ServiceAccount's name is the holder's choice.
	t.Run("the token controller cannot rename a token Secret's ServiceAccount", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := newWorker(t, ns, "app-operator")
		grantRuleObjects(t, ns, holder.User, admission.TokenControllerUser)
		grantPolicies(t, ns, holder.User)
		rulePolicy(t, ns)
		tok := holder.Acquire(t, ns, appLease, 1)
		hc := fencing.NewClient(holder.Client, tokenOf(tok))
		sa := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-token",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
		if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, sa) }); err != nil {
			t.Fatal(err)
		}
		tc := userClient(t, admission.TokenControllerUser)
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
			client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(elector.FieldManagerFor(2))); err != nil {
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
		holder := newWorker(t, ns, "app-operator")
		const kcm = admission.ControllerManagerUser
		grantRuleObjects(t, ns, holder.User, "editor", admission.VolumeBinderUser, kcm, admission.ReplicaSetCtrlUser)
		grantPolicies(t, ns, holder.User)
		rulePolicy(t, ns)
		tok := holder.Acquire(t, ns, appLease, 1)
		hc := fencing.NewClient(holder.Client, tokenOf(tok))
		for _, n := range []string{"data", "bound"} {
			if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, claim(ns, n)) }); err != nil {
				t.Fatal(err)
			}
		}
		binder, editor, single, rs := userClient(t, admission.VolumeBinderUser), userClient(t, "editor"), userClient(t, kcm),
			userClient(t, admission.ReplicaSetCtrlUser)
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
		holder := newWorker(t, ns, "app-operator")
		grantRuleObjects(t, ns, holder.User, "editor", admission.TokenControllerUser)
		grantPolicies(t, ns, holder.User)
		rulePolicy(t, ns)
		tok := holder.Acquire(t, ns, appLease, 1)
		hc := fencing.NewClient(holder.Client, tokenOf(tok))
		sa := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-token",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{"extra": []byte("holder")}}
		opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opaque"}, Data: map[string][]byte{"v": []byte("holder")}}
		for _, s := range []*corev1.Secret{sa, opaque} {
			if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, s.DeepCopy()) }); err != nil {
				t.Fatal(err)
			}
		}
		tc, editor := userClient(t, admission.TokenControllerUser), userClient(t, "editor")
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
		if got := readObject[corev1.Secret](t, ns, "sa-token"); string(got.Data["extra"]) != "holder" {
			t.Errorf("the holder's data in the token Secret is %q", got.Data["extra"])
		}
	})

	// The TTL controller's exemption: only a finished Job with a TTL.
	t.Run("the TTL controller deletes only finished Jobs with a TTL", func(t *testing.T) {
		ns := env.Namespace(t)
		holder := newWorker(t, ns, "app-operator")
		grantRuleObjects(t, ns, holder.User, "editor", admission.TTLControllerUser)
		grantPolicies(t, ns, holder.User)
		rulePolicy(t, ns)
		tok := holder.Acquire(t, ns, appLease, 1)
		hc := fencing.NewClient(holder.Client, tokenOf(tok))
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
		ttl, editor := userClient(t, admission.TTLControllerUser), userClient(t, "editor")
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
		r1.Fences, r2.Fences = elector.Fences{Objects: true}, elector.Fences{Objects: true}
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
			if err := c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(elector.FieldManagerFor(epoch))); err != nil {
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
		holder := newWorker(t, ns, "app-operator")
		grantRuleObjects(t, ns, holder.User, "editor")
		grantPolicies(t, ns, holder.User)
		rulePolicy(t, ns)
		tok := holder.Acquire(t, ns, appLease, 1)
		hc := fencing.NewClient(holder.Client, tokenOf(tok))
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}, Data: map[string][]byte{"v": []byte("holder")}}
		if err := retryRBAC(t, "the holder's create", func() error { return hc.Create(ctx, s) }); err != nil {
			t.Fatal(err)
		}
		editor := userClient(t, "editor")
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
