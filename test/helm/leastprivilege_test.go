package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/controllers"
	"github.com/fencekit/fencekit/pkg/elector"
)

// waitForOperatorPolicies waits until the apiserver enforces the chart's policies on the operator's
// ServiceAccount op: an admission policy takes effect a moment after it is created (the apiserver loads it
// from an informer; docs/design/rbac.md). It probes with dry runs that each policy
// refuses and RBAC allows, so the probes change nothing.
func waitForOperatorPolicies(t *testing.T, op identity, release, objectsVWC string) {
	t.Helper()
	c := op.client(t)
	waitFor(t, "the policy on the operator's Lease writes to be enforced", func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: release}}, client.DryRunAll)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may create only its election Lease"), err
	})
	waitFor(t, "the policy on the operator's webhook configuration writes to be enforced", func(ctx context.Context) (bool, error) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: objectsVWC}, vwc); err != nil {
			return false, err
		}
		vwc.Labels["probe"] = "x"
		err := c.Update(ctx, vwc, client.DryRunAll)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may not change the labels"), err
	})
}

// refused asserts that err is the apiserver's Forbidden (RBAC or an admission policy) and, if want is not
// empty, that its message contains want.
func refused(t *testing.T, attack string, err error, want string) {
	t.Helper()
	refusedByAny(t, attack, err, want)
}

// refusedByAny is refused for a request that several policies deny: the apiserver reports the first
// denial it meets, and the order in which it evaluates policies is not part of its API (1.35 and 1.37
// differ), so the message may be any of wants.
func refusedByAny(t *testing.T, attack string, err error, wants ...string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: admitted, want Forbidden", attack)
	case !apierrors.IsForbidden(err):
		t.Errorf("%s: got %v, want Forbidden", attack, err)
	case !slices.ContainsFunc(wants, func(w string) bool { return strings.Contains(err.Error(), w) }):
		t.Errorf("%s: refused with %q, want a message containing one of %q", attack, err, wants)
	}
}

// TestOperatorTokenAttacks makes, as the chart's operator ServiceAccount and with only the chart's
// permissions and policies, the requests a stolen operator token would make to get around fencing, and
// checks that the apiserver refuses each; and that what the operator's code does with the same
// verbs is admitted.
func TestOperatorTokenAttacks(t *testing.T) {
	r, release := installRBAC(t)
	op := serviceAccount(release, "rbac-fencekit-manager")
	c := op.client(t)
	user := env.Namespace(t)
	ctx := t.Context()

	t.Run("kube-system leases", func(t *testing.T) {
		// What kube-controller-manager keeps in kube-system: a plain Lease, no fencekit label.
		kcm := &coordinationv1.Lease{}
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "kube-controller-manager"}, kcm)
		if apierrors.IsNotFound(err) {
			now := metav1.NewMicroTime(time.Now())
			kcm = &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager", Namespace: "kube-system"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("control-plane-1_6f1c0b9e"), LeaseDurationSeconds: ptr.To[int32](15),
					AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](3)},
			}
			if err := env.Client.Create(ctx, kcm); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		holder := ptr.Deref(kcm.Spec.HolderIdentity, "")

		taken := kcm.DeepCopy()
		taken.Spec.HolderIdentity = ptr.To("attacker")
		refused(t, "the operator updating the holder of kube-system/kube-controller-manager", c.Update(ctx, taken), "")
		refused(t, "the operator patching the holder of kube-system/kube-controller-manager",
			c.Patch(ctx, taken, client.MergeFrom(kcm)), "may not change the spec of Lease kube-system/kube-controller-manager")
		withFinalizer := kcm.DeepCopy()
		withFinalizer.Finalizers = append(withFinalizer.Finalizers, controllers.LeaseFinalizer)
		refused(t, "the operator pinning kube-system/kube-controller-manager with its finalizer",
			c.Patch(ctx, withFinalizer, client.MergeFrom(kcm)), "may not add its finalizer to Lease kube-system/kube-controller-manager")

		after := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(kcm), after); err != nil {
			t.Fatal(err)
		}
		if got := ptr.Deref(after.Spec.HolderIdentity, ""); got != holder || len(after.Finalizers) != len(kcm.Finalizers) {
			t.Errorf("kube-system/kube-controller-manager changed: holder %q (was %q), finalizers %v", got, holder, after.Finalizers)
		}
	})

	t.Run("fenced leases", func(t *testing.T) {
		// A fenced Lease as pkg/elector leaves it, held at epoch 5 by a workload (created by an admin: the
		// test only needs its state).
		worker := "system:serviceaccount:" + user + ":orders-worker"
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "orders-writer", Namespace: user,
				Labels:      map[string]string{"fencing.fencekit.io/fenced": "true"},
				Annotations: map[string]string{"fencing.fencekit.io/epoch": "5", "fencing.fencekit.io/acquirer": worker}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("orders-worker-0"), LeaseDurationSeconds: ptr.To[int32](15)},
		}
		if err := env.Client.Create(ctx, lease); err != nil {
			t.Fatal(err)
		}
		// The acquisition the Lease policy admits from anyone with write access: epoch+1, the requester as
		// acquirer, a holder, the epoch as field manager. From the operator's identity it would fence out
		// the workload.
		takeover := lease.DeepCopy()
		takeover.Annotations["fencing.fencekit.io/epoch"] = "6"
		takeover.Annotations["fencing.fencekit.io/acquirer"] = op.user
		takeover.Spec.HolderIdentity = ptr.To("attacker")
		fm := client.FieldOwner(elector.FieldManagerFor(6))
		refused(t, "the operator updating a fenced Lease to epoch 6 under its own name", c.Update(ctx, takeover.DeepCopy(), fm), "")
		refused(t, "the operator patching a fenced Lease to epoch 6 under its own name",
			c.Patch(ctx, takeover.DeepCopy(), client.MergeFrom(lease), fm), "may not change the spec of Lease "+user+"/orders-writer")
		epochOnly := lease.DeepCopy()
		epochOnly.Annotations["fencing.fencekit.io/epoch"] = "6"
		epochOnly.Annotations["fencing.fencekit.io/acquirer"] = op.user
		refused(t, "the operator raising a fenced Lease's epoch without touching the spec",
			c.Patch(ctx, epochOnly, client.MergeFrom(lease), fm), "may not change the labels, annotations (epoch, acquirer)")
		otherFinalizer := lease.DeepCopy()
		otherFinalizer.Finalizers = []string{"example.com/keep"}
		refused(t, "the operator adding a finalizer that is not its own",
			c.Patch(ctx, otherFinalizer, client.MergeFrom(lease)), "may add and remove only its own finalizer")
		// A Lease of its own choosing, fenced, at an epoch of its choosing, in its namespace (where RBAC lets it
		// create its election Lease).
		planted := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "orders-writer", Namespace: release,
			Labels:      map[string]string{"fencing.fencekit.io/fenced": "true"},
			Annotations: map[string]string{"fencing.fencekit.io/epoch": "1000", "fencing.fencekit.io/acquirer": op.user}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("attacker")}}
		refused(t, "the operator creating a fenced Lease of its choosing in its namespace",
			c.Create(ctx, planted, client.FieldOwner(elector.FieldManagerFor(1000))), "may create only its election Lease")
		refused(t, "the operator creating a Lease in a user's namespace", c.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: user}}), "")

		// What the Lease protector does, with the same patch verb: add and remove its finalizer.
		protected := lease.DeepCopy()
		controllerutil.AddFinalizer(protected, controllers.LeaseFinalizer)
		if err := c.Patch(ctx, protected, client.MergeFromWithOptions(lease, client.MergeFromWithOptimisticLock{})); err != nil {
			t.Fatalf("the operator adding its finalizer to a bound Lease: %v", err)
		}
		released := protected.DeepCopy()
		released.Finalizers = slices.DeleteFunc(released.Finalizers, func(f string) bool { return f == controllers.LeaseFinalizer })
		if err := c.Patch(ctx, released, client.MergeFromWithOptions(protected, client.MergeFromWithOptimisticLock{})); err != nil {
			t.Fatalf("the operator removing its finalizer: %v", err)
		}
		after := &coordinationv1.Lease{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), after); err != nil {
			t.Fatal(err)
		}
		if after.Annotations["fencing.fencekit.io/epoch"] != "5" || ptr.Deref(after.Spec.HolderIdentity, "") != "orders-worker-0" {
			t.Errorf("the fenced Lease changed: epoch %s, holder %q", after.Annotations["fencing.fencekit.io/epoch"], ptr.Deref(after.Spec.HolderIdentity, ""))
		}
	})

	t.Run("secrets", func(t *testing.T) {
		// Another application's Secret in the operator's namespace (a shared namespace).
		app := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-password", Namespace: release}, StringData: map[string]string{"password": "s3cr3t"}}
		if err := env.Client.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
		refused(t, "the operator reading another Secret of its namespace", c.Get(ctx, client.ObjectKeyFromObject(app), &corev1.Secret{}), "")
		refused(t, "the operator listing the Secrets of its namespace", c.List(ctx, &corev1.SecretList{}, client.InNamespace(release)), "")
		refused(t, "the operator listing another Secret by name", c.List(ctx, &corev1.SecretList{}, client.InNamespace(release),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", app.Name)}), "")
		// What the certificate rotation's cache does: list the certificate Secret by name.
		var own corev1.SecretList
		if err := c.List(ctx, &own, client.InNamespace(release),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", "rbac-fencekit-webhook-cert")}); err != nil {
			t.Fatalf("the operator listing its certificate Secret by name: %v", err)
		}
		if len(own.Items) != 1 {
			t.Errorf("listing the certificate Secret by name found %d Secrets", len(own.Items))
		}
	})

	// The operator runs as its ServiceAccount from here on: the FencingPolicy controller writes the object
	// webhooks under the policy.
	startChartOperator(t, op, r, release)

	t.Run("unchecked namespaces", func(t *testing.T) {
		checkUncheckedUpdate(t, env.Namespace(t))
	})

	t.Run("webhook configurations", func(t *testing.T) {
		policy := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: user},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "orders-writer",
				Resources: []fencingv1alpha1.FencedObjects{{Group: "", Resource: "configmaps"}}}}
		if err := env.Client.Create(ctx, policy); err != nil {
			t.Fatalf("declaring a FencingPolicy (admitted by the operator's webhook): %v", err)
		}
		// The chart's FencedResource webhooks. They call a Service without pods and fail closed: from here on
		// FencedResource and FencingPolicy writes outside the release namespace fail until the test ends.
		own := r.get(t, "ValidatingWebhookConfiguration", "rbac-fencekit-validating-webhook")
		apply(t, own)
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), own.DeepCopy()) })
		objectsKey := client.ObjectKey{Name: "rbac-fencekit-objects"}
		// What the FencingPolicy controller does: write the namespace's webhook, under the policy.
		waitFor(t, "the operator to write the object webhook of "+user, func(ctx context.Context) (bool, error) {
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			err := env.Client.Get(ctx, objectsKey, vwc)
			return err == nil && len(vwc.Webhooks) == 1 && vwc.Webhooks[0].Name == user+".objects.fencing.fencekit.io", err
		})

		ownKey := client.ObjectKey{Name: own.GetName()}
		attacks := []struct {
			name, config, want string
			change             func(*admissionregistrationv1.ValidatingWebhookConfiguration)
		}{
			{"failurePolicy Ignore on fencekit's webhooks", ownKey.Name, "may change only webhooks[*].clientConfig.caBundle", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				for i := range v.Webhooks {
					v.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
				}
			}},
			{"empty rules on fencekit's webhooks", ownKey.Name, "may change only webhooks[*].clientConfig.caBundle", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				for i := range v.Webhooks {
					v.Webhooks[i].Rules = nil
				}
			}},
			{"no webhooks in fencekit's configuration", ownKey.Name, "may change only webhooks[*].clientConfig.caBundle", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks = nil
			}},
			{"a namespace excluded from fencekit's webhooks", ownKey.Name, "may change only webhooks[*].clientConfig.caBundle", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values = append(v.Webhooks[0].NamespaceSelector.MatchExpressions[0].Values, user)
			}},
			{"fencekit's webhooks sent elsewhere", ownKey.Name, "may change only webhooks[*].clientConfig.caBundle", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].ClientConfig.Service.Name = "attacker"
			}},
			{"failurePolicy Ignore on an object webhook", objectsKey.Name, "only webhooks <namespace>.objects.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			}},
			{"an object webhook for every namespace", objectsKey.Name, "only webhooks <namespace>.objects.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{}
			}},
			{"an object webhook for kube-system", objectsKey.Name, "only webhooks <namespace>.objects.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].Name = "kube-system.objects.fencing.fencekit.io"
				v.Webhooks[0].NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "kube-system"}
			}},
			{"an object webhook sent elsewhere", objectsKey.Name, "only webhooks <namespace>.objects.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].ClientConfig.Service.Namespace = user
			}},
			{"an object webhook without DELETE", objectsKey.Name, "only webhooks <namespace>.objects.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].Rules[0].Operations = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
			}},
			{"an object webhook with a match condition", objectsKey.Name, "only webhooks <namespace>.objects.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[0].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}}
			}},
			{"a label on the object webhooks' configuration", objectsKey.Name, "may not change the labels", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Labels["app.kubernetes.io/managed-by"] = "attacker"
			}},
		}
		for _, a := range attacks {
			var before, vwc *admissionregistrationv1.ValidatingWebhookConfiguration
			// The running FencingPolicy controller may write the object webhooks between the read and the
			// attack: a conflict is not an answer, so read again.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				vwc = &admissionregistrationv1.ValidatingWebhookConfiguration{}
				if err := env.Client.Get(ctx, client.ObjectKey{Name: a.config}, vwc); err != nil {
					return err
				}
				before = vwc.DeepCopy()
				a.change(vwc)
				return c.Update(ctx, vwc)
			})
			refused(t, "the operator writing "+a.name, err, a.want)
			if err == nil {
				// Admitted (a failing test): put the configuration back so that the next attack starts from it.
				before.ResourceVersion = vwc.ResourceVersion
				if err := env.Client.Update(ctx, before); err != nil {
					t.Fatalf("restoring %s: %v", a.config, err)
				}
			}
		}
		stored := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := env.Client.Get(ctx, ownKey, stored); err != nil {
			t.Fatal(err)
		}
		for _, w := range stored.Webhooks {
			if *w.FailurePolicy != admissionregistrationv1.Fail || len(w.Rules) == 0 {
				t.Errorf("webhook %s changed: failurePolicy %s, %d rules", w.Name, *w.FailurePolicy, len(w.Rules))
			}
		}
		// What the certificate rotation does: write the caBundle, and nothing else.
		bundle := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
		for i := range stored.Webhooks {
			stored.Webhooks[i].ClientConfig.CABundle = bundle
		}
		if err := c.Update(ctx, stored); err != nil {
			t.Fatalf("the operator injecting a caBundle: %v", err)
		}
		if !bytes.Equal(stored.Webhooks[0].ClientConfig.CABundle, bundle) {
			t.Error("the caBundle was not stored")
		}
	})
}

// checkUncheckedUpdate: a FencedResource created in a namespace the webhook checks cannot be updated once
// the namespace is excluded (webhook.excludeNamespaces), where the webhook would no longer check the write.
func checkUncheckedUpdate(t *testing.T, namespace string) {
	t.Helper()
	ctx := t.Context()
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: "before-exclusion", Namespace: namespace},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer"}}
	if err := env.Client.Create(ctx, fr); err != nil {
		t.Fatalf("creating a FencedResource (admitted by the operator's webhook): %v", err)
	}
	// The same release upgraded with the namespace excluded.
	var policy rendered
	for _, u := range objects(t, ns, "--set", "webhook.excludeNamespaces={"+namespace+"}") {
		if strings.HasPrefix(u.GetKind(), "ValidatingAdmissionPolicy") && u.GetName() == "fencekit-unchecked-namespaces" {
			policy = append(policy, u)
		}
	}
	if len(policy) != 2 {
		t.Fatalf("the chart renders %d objects named fencekit-unchecked-namespaces, want a policy and its binding", len(policy))
	}
	for _, u := range policy {
		apply(t, u)
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u.DeepCopy()) })
	}
	want := fmt.Sprintf("FencedResources and FencingPolicies cannot be created or updated in namespaces that fencekit's admission webhook does not check: %s, kube-system, %s", ns, namespace)
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		current := &fencingv1alpha1.FencedResource{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(fr), current); err != nil {
			return false, err
		}
		current.Labels = map[string]string{"touched": "true"}
		last = env.Client.Update(ctx, current, client.DryRunAll)
		return apierrors.IsForbidden(last) && strings.Contains(last.Error(), want), nil
	})
	if err != nil {
		t.Errorf("updating a FencedResource in a namespace that became excluded: %v, want the refusal %q", last, want)
	}
}

// TestChartRefusesSystemNamespaces: the release namespace holds the operator's certificate Secret and
// election Lease and is not checked by the webhook, so the chart refuses default and kube-system unless
// told otherwise, with a message that says what to do.
func TestChartRefusesSystemNamespaces(t *testing.T) {
	for _, namespace := range []string{"default", "kube-system"} {
		_, err := template(t, namespace)
		want := fmt.Sprintf("refusing to install fencekit into namespace %q", namespace)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "allowSystemNamespace=true") {
			t.Errorf("helm template --namespace %s: %v, want an error containing %q and naming allowSystemNamespace=true", namespace, err, want)
		}
		r := objects(t, namespace, "--set", "allowSystemNamespace=true")
		if sa := r.get(t, "ServiceAccount", "fencekit-manager"); sa.GetNamespace() != namespace {
			t.Errorf("with allowSystemNamespace=true the ServiceAccount is in %q, want %q", sa.GetNamespace(), namespace)
		}
	}
	if _, err := template(t, ns); err != nil {
		t.Errorf("helm template --namespace %s: %v", ns, err)
	}
}

// TestOperatorPoliciesMatchTheServiceAccount: the operator's policies match the user the operator runs as,
// also with a ServiceAccount of the user's naming.
func TestOperatorPoliciesMatchTheServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		args []string
		user string
	}{
		{nil, "system:serviceaccount:" + ns + ":fencekit-manager"},
		{[]string{"--set", "serviceAccount.create=false,serviceAccount.name=ops-fencekit"}, "system:serviceaccount:" + ns + ":ops-fencekit"},
	} {
		r := objects(t, ns, tc.args...)
		for _, name := range []string{"fencekit-operator-leases", "fencekit-operator-webhooks"} {
			p := as[admissionregistrationv1.ValidatingAdmissionPolicy](t, r.get(t, "ValidatingAdmissionPolicy", name))
			want := "request.userInfo.username == '" + tc.user + "'"
			if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != want {
				t.Errorf("%v: policy %s matches %+v, want only %q", tc.args, name, p.Spec.MatchConditions, want)
			}
			if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("policy %s: failurePolicy %v, want Fail", name, p.Spec.FailurePolicy)
			}
		}
	}
}
