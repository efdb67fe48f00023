package helm_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The attacks of this file are made by an attacker who holds one of the identities the chart creates or
// tells users to create, with only the chart's permissions and policies, against the real apiserver; each
// asserts the apiserver's refusal and its message. TestOperatorTokenAttacks makes the requests of a stolen
// operator token; the TestAttacker tests take the other paths to the same ends: other verbs, subresources,
// server-side apply, dry runs, RBAC escalation, admission objects, a second release, and the other
// identities (the elector role, the helm test's ServiceAccount, a namespace admin, a metrics scraper).

// fencedLease creates, as the admin, a fenced Lease held at epoch 5 by the user acquirer, as pkg/elector
// leaves it.
func fencedLease(t *testing.T, namespace, name, acquirer string) *coordinationv1.Lease {
	t.Helper()
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace,
			Labels:      map[string]string{"fencing.fencekit.io/fenced": "true"},
			Annotations: map[string]string{"fencing.fencekit.io/epoch": "5", "fencing.fencekit.io/acquirer": acquirer}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("worker-0"), LeaseDurationSeconds: ptr.To[int32](15)},
	}
	if err := env.Client.Create(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	return lease
}

// unchanged asserts that the Lease still has epoch 5, holder worker-0, the fenced label and no finalizer.
func unchanged(t *testing.T, lease *coordinationv1.Lease) {
	t.Helper()
	after := &coordinationv1.Lease{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(lease), after); err != nil {
		t.Fatal(err)
	}
	if after.Annotations["fencing.fencekit.io/epoch"] != "5" || ptr.Deref(after.Spec.HolderIdentity, "") != "worker-0" ||
		after.Labels["fencing.fencekit.io/fenced"] != "true" || len(after.Finalizers) != 0 {
		t.Errorf("Lease %s/%s changed: epoch %q, holder %q, labels %v, finalizers %v", after.Namespace, after.Name,
			after.Annotations["fencing.fencekit.io/epoch"], ptr.Deref(after.Spec.HolderIdentity, ""), after.Labels, after.Finalizers)
	}
}

// applyLease is a server-side apply of a Lease given as an unstructured object.
func applyLease(ctx context.Context, c client.Client, namespace, name string, fields map[string]any, opts ...client.ApplyOption) error {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": name, "namespace": namespace}}}
	for k, v := range fields {
		u.Object[k] = v
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

// TestAttackerOperatorToken: a stolen token of the operator's ServiceAccount, trying what the requests of
// TestOperatorTokenAttacks do by other routes.
func TestAttackerOperatorToken(t *testing.T) {
	r, release := installRBAC(t)
	op := serviceAccount(release, "rbac-fencekit-manager")
	c := op.client(t)
	user := env.Namespace(t)
	ctx := t.Context()
	worker := "system:serviceaccount:" + user + ":orders-worker"

	t.Run("leases by other verbs and routes", func(t *testing.T) {
		lease := fencedLease(t, user, "orders-writer", worker)
		fm := client.FieldOwner(protocol.FieldManagerFor(6))
		takeover := map[string]any{
			"metadata": map[string]any{"name": lease.Name, "namespace": user,
				"annotations": map[string]any{"fencing.fencekit.io/epoch": "6", "fencing.fencekit.io/acquirer": op.user}},
			"spec": map[string]any{"holderIdentity": "attacker"},
		}
		refused(t, "the operator taking over a fenced Lease by server-side apply (forced)",
			applyLease(ctx, c, user, lease.Name, takeover, fm, client.ForceOwnership), "may not change the spec of Lease "+user+"/orders-writer")
		refused(t, "the operator raising a fenced Lease's epoch by server-side apply",
			applyLease(ctx, c, user, lease.Name, map[string]any{"metadata": takeover["metadata"]}, fm, client.ForceOwnership),
			"may not change the labels, annotations (epoch, acquirer)")
		// Both the Lease policy and the operator's deny this one; either may answer first.
		refusedByAny(t, "the operator emptying a fenced Lease's labels with a merge patch",
			c.Patch(ctx, lease.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":null}}`))),
			"the label fencing.fencekit.io/fenced=true cannot be removed", "may not change the labels, annotations (epoch, acquirer)")
		// A Lease that is not fenced (yet): the Lease policy does not match it, only the operator's.
		plain := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "app-leader", Namespace: user, Labels: map[string]string{"app": "web"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("web-0"), LeaseDurationSeconds: ptr.To[int32](15)}}
		if err := env.Client.Create(ctx, plain); err != nil {
			t.Fatal(err)
		}
		refused(t, "the operator removing a Lease's labels with a JSON patch",
			c.Patch(ctx, plain.DeepCopy(), client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/labels"}]`))),
			"may not change the labels, annotations (epoch, acquirer) or owners of Lease "+user+"/app-leader")
		refused(t, "the operator labelling a Lease fenced by server-side apply",
			applyLease(ctx, c, user, plain.Name, map[string]any{"metadata": map[string]any{"name": plain.Name, "namespace": user,
				"labels": map[string]any{"fencing.fencekit.io/fenced": "true"}}}, client.FieldOwner("attacker")),
			"may not change the labels, annotations (epoch, acquirer) or owners of Lease "+user+"/app-leader")
		refused(t, "the operator adding an owner reference (garbage collection with its owner)",
			c.Patch(ctx, plain.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"00000000-0000-0000-0000-000000000001"}]}}`))),
			"may not change the labels, annotations (epoch, acquirer) or owners")
		dry := plain.DeepCopy()
		dry.Spec.HolderIdentity = ptr.To("attacker")
		refused(t, "the operator taking over a Lease in a dry run (a probe of the policy)",
			c.Patch(ctx, dry, client.MergeFrom(plain), client.DryRunAll), "may not change the spec of Lease "+user+"/app-leader")
		refused(t, "the operator updating (PUT) a Lease that is not its election Lease", c.Update(ctx, dry.DeepCopy()), "cannot update resource \"leases\"")
		refused(t, "the operator deleting a fenced Lease", c.Delete(ctx, lease.DeepCopy()), "cannot delete resource \"leases\"")
		refused(t, "the operator deleting every Lease of a namespace",
			c.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(user)), "cannot deletecollection resource \"leases\"")
		refused(t, "the operator deleting its own election Lease (a forced re-election)",
			c.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fencekit-manager", Namespace: release}}), "cannot delete resource \"leases\"")
		refused(t, "the operator creating a Lease whose generated name starts like its election Lease",
			c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{GenerateName: "fencekit-manager", Namespace: release}}),
			"may create only its election Lease "+release+"/fencekit-manager")
		refused(t, "the operator creating a Lease in a user's namespace by server-side apply",
			applyLease(ctx, c, user, "planted", map[string]any{"spec": map[string]any{"holderIdentity": "attacker"}}, client.FieldOwner("attacker")),
			"cannot create resource \"leases\"")
		refused(t, "the operator creating another Lease in its namespace by server-side apply",
			applyLease(ctx, c, release, "planted", map[string]any{"spec": map[string]any{"holderIdentity": "attacker"}}, client.FieldOwner("attacker")),
			"may create only its election Lease "+release+"/fencekit-manager")
		scheduler := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler", Namespace: "kube-system"}}
		if err := env.Client.Create(ctx, scheduler); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		refused(t, "the operator pinning a kube-system Lease with its finalizer by server-side apply",
			applyLease(ctx, c, "kube-system", "kube-scheduler", map[string]any{"metadata": map[string]any{"name": "kube-scheduler", "namespace": "kube-system",
				"finalizers": []any{controllers.LeaseFinalizer}}}, client.FieldOwner("attacker")),
			"may not add its finalizer to Lease kube-system/kube-scheduler")
		unchanged(t, lease)
	})

	t.Run("its finalizer on leases no fencekit elector manages", func(t *testing.T) {
		// A policy cannot see which Leases FencedResources are bound to; the protector protects only Leases
		// labelled fenced (the webhook trusts no other Lease's epoch), so that is all the policy admits.
		want := "may not add its finalizer fencing.fencekit.io/protect to Lease "
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-node-lease"}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		heartbeat := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Namespace: "kube-node-lease"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1"), LeaseDurationSeconds: ptr.To[int32](40)}}
		if err := env.Client.Create(ctx, heartbeat); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(heartbeat), heartbeat); err != nil {
			t.Fatal(err)
		}
		pinned := heartbeat.DeepCopy()
		controllerutil.AddFinalizer(pinned, controllers.LeaseFinalizer)
		refused(t, "the operator pinning a node's heartbeat Lease with its finalizer (merge patch, as the protector patches)",
			c.Patch(ctx, pinned, client.MergeFromWithOptions(heartbeat, client.MergeFromWithOptimisticLock{})), want+"kube-node-lease/node-1")
		refused(t, "the operator pinning a node's heartbeat Lease with its finalizer by server-side apply",
			applyLease(ctx, c, "kube-node-lease", "node-1", map[string]any{"metadata": map[string]any{"name": "node-1", "namespace": "kube-node-lease",
				"finalizers": []any{controllers.LeaseFinalizer}}}, client.FieldOwner("attacker")), want+"kube-node-lease/node-1")
		// An application's own election Lease in a namespace the webhook checks, labelled but not fenced.
		app := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "web-leader", Namespace: user,
			Labels: map[string]string{"app": "web", "fencing.fencekit.io/fenced": "false"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("web-0"), LeaseDurationSeconds: ptr.To[int32](15)}}
		if err := env.Client.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
		pinned = app.DeepCopy()
		pinned.Finalizers = []string{controllers.LeaseFinalizer}
		refused(t, "the operator pinning an application's Lease with its finalizer (JSON patch)",
			c.Patch(ctx, pinned, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/finalizers","value":["`+controllers.LeaseFinalizer+`"]}]`))),
			want+user+"/web-leader")
		for _, l := range []*coordinationv1.Lease{heartbeat, app} {
			after := &coordinationv1.Lease{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(l), after); err != nil {
				t.Fatal(err)
			}
			if slices.Contains(after.Finalizers, controllers.LeaseFinalizer) {
				t.Errorf("Lease %s/%s was pinned: finalizers %v", l.Namespace, l.Name, after.Finalizers)
			}
		}
		// A Lease protected before the protector looked at labels (or one an admin marked): the operator
		// still releases it.
		old := app.DeepCopy()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(app), old); err != nil {
			t.Fatal(err)
		}
		marked := old.DeepCopy()
		controllerutil.AddFinalizer(marked, controllers.LeaseFinalizer)
		if err := env.Client.Patch(ctx, marked, client.MergeFrom(old)); err != nil {
			t.Fatalf("the admin adding the operator's finalizer to %s/%s: %v", app.Namespace, app.Name, err)
		}
		released := marked.DeepCopy()
		controllerutil.RemoveFinalizer(released, controllers.LeaseFinalizer)
		if err := c.Patch(ctx, released, client.MergeFromWithOptions(marked, client.MergeFromWithOptimisticLock{})); err != nil {
			t.Errorf("the operator removing its finalizer from a Lease that is not fenced: %v", err)
		}
	})

	t.Run("identity", func(t *testing.T) {
		// Another user name, or a break-glass group, would escape the policies: impersonation is the only way
		// a token acts as someone else.
		checkAccess(t, op, nil, []access{
			{verb: "impersonate", resource: "users"},
			{verb: "impersonate", resource: "groups"},
			{verb: "impersonate", resource: "serviceaccounts", namespace: release},
			{verb: "create", resource: "serviceaccounts", subresource: "token", namespace: release, name: "rbac-fencekit-manager"},
		})
	})

	t.Run("admission objects", func(t *testing.T) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "attacker"}}
		refused(t, "the operator creating a webhook configuration", c.Create(ctx, vwc), "cannot create resource \"validatingwebhookconfigurations\"")
		refused(t, "the operator deleting fencekit's webhook configuration",
			c.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fencekit-validating-webhook"}}),
			"cannot delete resource \"validatingwebhookconfigurations\"")
		refused(t, "the operator emptying the object webhooks' configuration with a patch",
			c.Patch(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fencekit-objects"}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":null}}`))),
			"cannot patch resource \"validatingwebhookconfigurations\"")
		refused(t, "the operator updating another webhook configuration",
			c.Update(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "other-webhooks", ResourceVersion: "1"}}),
			"cannot update resource \"validatingwebhookconfigurations\"")
		for _, name := range []string{"rbac-fencekit-operator-leases", "rbac-fencekit-operator-webhooks", "rbac-fencekit-fenced-leases", "rbac-fencekit-unchecked-namespaces"} {
			refused(t, "the operator deleting the policy binding "+name,
				c.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}}),
				"cannot delete resource \"validatingadmissionpolicybindings\"")
			refused(t, "the operator switching the policy binding "+name+" to Audit",
				c.Patch(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}},
					client.RawPatch(types.MergePatchType, []byte(`{"spec":{"validationActions":["Audit"]}}`))),
				"cannot patch resource \"validatingadmissionpolicybindings\"")
			refused(t, "the operator matching no request with the policy "+name,
				c.Patch(ctx, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}},
					client.RawPatch(types.MergePatchType, []byte(`{"spec":{"matchConditions":[{"name":"never","expression":"false"}]}}`))),
				"cannot patch resource \"validatingadmissionpolicies\"")
		}
		refused(t, "the operator binding a policy of its own", c.Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "attacker"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "rbac-fencekit-operator-leases", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Audit}}}),
			"cannot create resource \"validatingadmissionpolicybindings\"")
	})

	t.Run("rbac escalation", func(t *testing.T) {
		role := &rbacv1.Role{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: release, Name: "rbac-fencekit-manager"}, role); err != nil {
			t.Fatal(err)
		}
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}})
		refused(t, "the operator widening its own Role", c.Update(ctx, role), "cannot update resource \"roles\"")
		refused(t, "the operator binding cluster-admin to itself in its namespace", c.Create(ctx, roleBinding(release, "attacker", "cluster-admin", release, "rbac-fencekit-manager")),
			"cannot create resource \"rolebindings\"")
		refused(t, "the operator binding the elector role to itself cluster-wide", c.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "attacker"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rbac-fencekit-elector"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "rbac-fencekit-manager", Namespace: release}}}),
			"cannot create resource \"clusterrolebindings\"")
		refused(t, "the operator changing its own Deployment (another ServiceAccount, another image)",
			c.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fencekit-manager", Namespace: release}},
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"serviceAccountName":"default"}}}}`))),
			"cannot patch resource \"deployments\"")
		refused(t, "the operator starting a pod in its namespace", c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "attacker", Namespace: release},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}), "cannot create resource \"pods\"")
		checkAccess(t, op, nil, []access{
			{verb: "bind", group: rbacv1.GroupName, resource: "clusterroles"},
			{verb: "escalate", group: rbacv1.GroupName, resource: "clusterroles"},
			{verb: "bind", group: rbacv1.GroupName, resource: "roles", namespace: release},
			{verb: "escalate", group: rbacv1.GroupName, resource: "roles", namespace: release},
		})
	})

	t.Run("secrets by other routes", func(t *testing.T) {
		app := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-password", Namespace: release}, StringData: map[string]string{"password": "s3cr3t"}}
		if err := env.Client.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(op.config())
		if err != nil {
			t.Fatal(err)
		}
		w, err := cs.CoreV1().Secrets(release).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", app.Name).String()})
		if err == nil {
			w.Stop()
		}
		refused(t, "the operator watching another Secret by name", err, "cannot watch resource \"secrets\"")
		_, err = cs.CoreV1().Secrets(release).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name!=rbac-fencekit-webhook-cert"})
		refused(t, "the operator listing every Secret but its own with a negated field selector", err, "cannot list resource \"secrets\"")
		refused(t, "the operator listing Secrets cluster-wide", c.List(ctx, &corev1.SecretList{}), "cannot list resource \"secrets\"")
		refused(t, "the operator creating a Secret", c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: release}}),
			"cannot create resource \"secrets\"")
		refused(t, "the operator deleting its certificate Secret (a forced re-issue)",
			c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fencekit-webhook-cert", Namespace: release}}),
			"cannot delete resource \"secrets\"")
		refused(t, "the operator patching another Secret",
			c.Patch(ctx, app.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"password":"x"}}`))), "cannot patch resource \"secrets\"")
	})

	t.Run("object webhooks beyond what a FencingPolicy can declare", func(t *testing.T) {
		// The FencingPolicy controller writes only the groups and resources that FencingPolicies declare, and
		// a FencingPolicy cannot declare a wildcard or Leases (api/v1alpha1). A webhook that sends every
		// write of a namespace, or its Leases (kube-node-lease: every node's heartbeat), to fencekit's
		// webhook would fail them all closed whenever fencekit is unavailable.
		webhook := func(namespace string, rule admissionregistrationv1.Rule) admissionregistrationv1.ValidatingWebhook {
			rule.Scope = ptr.To(admissionregistrationv1.NamespacedScope)
			return admissionregistrationv1.ValidatingWebhook{
				Name: namespace + ".objects.fencing.fencekit.io",
				ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
					Name: "rbac-fencekit-webhook", Namespace: release, Path: ptr.To("/fence-objects"), Port: ptr.To[int32](443)}},
				Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{
					admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}, Rule: rule}},
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
				NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
				ObjectSelector:          &metav1.LabelSelector{},
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				TimeoutSeconds:          ptr.To[int32](5),
				AdmissionReviewVersions: []string{"v1"},
			}
		}
		write := func(hooks ...admissionregistrationv1.ValidatingWebhook) error {
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: "rbac-fencekit-objects"}, vwc); err != nil {
				t.Fatal(err)
			}
			vwc.Webhooks = hooks
			// A dry run: the policy decides it the same way, and nothing is sent anywhere if it is admitted.
			return c.Update(ctx, vwc, client.DryRunAll)
		}
		want := "only webhooks <namespace>.objects.fencing.fencekit.io"
		all := []string{"*"}
		refused(t, "the operator sending every write of a namespace to fencekit's webhook",
			write(webhook(user, admissionregistrationv1.Rule{APIGroups: all, APIVersions: all, Resources: all})), want)
		refused(t, "the operator sending every core write of a namespace to fencekit's webhook",
			write(webhook(user, admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: all, Resources: []string{"*/*"}})), want)
		refused(t, "the operator sending the node heartbeats to fencekit's webhook",
			write(webhook("kube-node-lease", admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: all, Resources: []string{"leases"}})), want)
		refused(t, "the operator sending a namespace's Lease writes to fencekit's webhook",
			write(webhook(user, admissionregistrationv1.Rule{APIGroups: []string{"apps", "coordination.k8s.io"}, APIVersions: all, Resources: []string{"leases/*"}})), want)
		// What the controller writes for a FencingPolicy of ConfigMaps is still admitted, with the Lease webhook.
		leases := controllers.LeaseWebhook(admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Name: "rbac-fencekit-webhook", Namespace: release, Path: ptr.To("/fence-leases"), Port: ptr.To[int32](443)}})
		if err := write(webhook(user, admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: all, Resources: []string{"configmaps", "configmaps/*"}}), leases); err != nil {
			t.Errorf("the operator writing the object webhook of a FencingPolicy of ConfigMaps (dry run): %v", err)
		}
	})

	// The operator runs as its ServiceAccount from here on: FencedResources are admitted by its webhook.
	startChartOperator(t, op, r, release)

	t.Run("fencedresources through the status subresource", func(t *testing.T) {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: user},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer"}}
		if err := env.Client.Create(ctx, fr); err != nil {
			t.Fatalf("creating a FencedResource (admitted by the operator's webhook): %v", err)
		}
		refused(t, "the operator writing a FencedResource's spec", c.Patch(ctx, fr.DeepCopy(),
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"epoch":1000}}`))), "cannot patch resource \"fencedresources\"")
		refused(t, "the operator updating a FencedResource's status whole (only patch is granted)", c.Status().Update(ctx, fr.DeepCopy()),
			"cannot update resource \"fencedresources/status\"")
		// The status subresource ignores everything but the status: a spec, labels or finalizers sent there
		// are not stored.
		if err := c.Status().Patch(ctx, fr.DeepCopy(), client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"x":"y"},"finalizers":["example.com/keep"]},"spec":{"epoch":1000,"leaseName":"other"}}`))); err != nil {
			t.Fatalf("the operator's status patch: %v", err)
		}
		after := &fencingv1alpha1.FencedResource{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(fr), after); err != nil {
			t.Fatal(err)
		}
		if after.Spec.LeaseName != "orders-writer" || after.Spec.Epoch != 0 || len(after.Labels) != 0 || len(after.Finalizers) != 0 {
			t.Errorf("a status patch changed more than the status: spec %+v, labels %v, finalizers %v", after.Spec, after.Labels, after.Finalizers)
		}
	})

	t.Run("its finalizer on a bound fenced lease", func(t *testing.T) {
		// orders-writer is labelled fenced and orders is bound to it: the running operator's protector, as
		// this ServiceAccount and under the policy, protects it.
		key := client.ObjectKey{Namespace: user, Name: "orders-writer"}
		waitFor(t, "the operator to protect the bound fenced Lease "+key.String(), func(ctx context.Context) (bool, error) {
			l := &coordinationv1.Lease{}
			err := env.Client.Get(ctx, key, l)
			return err == nil && slices.Contains(l.Finalizers, controllers.LeaseFinalizer), err
		})
	})
}

// bindRole binds the ClusterRoles roles to a new ServiceAccount sa of namespace and waits until probe is
// authorized for it.
func bindRole(t *testing.T, namespace, sa string, probe access, roles ...string) identity {
	t.Helper()
	if err := env.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: namespace}}); err != nil {
		t.Fatal(err)
	}
	for _, role := range roles {
		if err := env.Client.Create(t.Context(), roleBinding(namespace, sa+"-"+strings.ReplaceAll(role, ":", "-"), role, namespace, sa)); err != nil {
			t.Fatal(err)
		}
	}
	id := serviceAccount(namespace, sa)
	waitFor(t, "the bindings of "+sa, func(context.Context) (bool, error) { return allowed(t, id, probe), nil })
	return id
}

// TestAttackerOtherIdentities: a workload bound to the elector role and a namespace admin, each in its
// namespace, trying to get around the chart's policies and the operator's.
func TestAttackerOtherIdentities(t *testing.T) {
	_, release := installRBAC(t)
	ctx := t.Context()

	t.Run("fencekit-elector", func(t *testing.T) {
		user := env.Namespace(t)
		e := bindRole(t, user, "intruder", access{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: user}, "rbac-fencekit-elector")
		c := e.client(t)
		lease := fencedLease(t, user, "orders-writer", "system:serviceaccount:"+user+":orders-worker")
		unlabelled := lease.DeepCopy()
		delete(unlabelled.Labels, "fencing.fencekit.io/fenced")
		refused(t, "an elector removing the fenced label of another's Lease", c.Update(ctx, unlabelled),
			"the label fencing.fencekit.io/fenced=true cannot be removed")
		refused(t, "an elector deleting another's Lease", c.Delete(ctx, lease.DeepCopy()), "cannot delete resource \"leases\"")
		refused(t, "an elector taking over the operator's election Lease",
			c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fencekit-manager", Namespace: release}}),
			"cannot create resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \""+release+"\"")
		refused(t, "an elector creating a FencedResource (to bind a Lease it holds)", c.Create(ctx, &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: user}, Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer"}}),
			"cannot create resource \"fencedresources\"")
		refused(t, "an elector deleting the operator's Lease policy binding",
			c.Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fencekit-fenced-leases"}}),
			"cannot delete resource \"validatingadmissionpolicybindings\"")
		checkAccess(t, e, nil, []access{
			{verb: "update", group: "fencing.fencekit.io", resource: "fencedresources", subresource: "status", namespace: user},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-controller-manager"},
			{verb: "get", resource: "secrets", namespace: user},
			{verb: "impersonate", resource: "serviceaccounts", namespace: user},
		})
		unchanged(t, lease)
	})

	t.Run("the helm test's ServiceAccount, left behind by a failed test", func(t *testing.T) {
		// Helm keeps the test hook's objects when the test fails: its ServiceAccount stays bound to the
		// elector role in tests.namespace.
		user := env.Namespace(t)
		r := releaseObjects(t, "rbac", release, "--set", "tests.namespace="+user)
		for _, kind := range []string{"ServiceAccount", "RoleBinding"} {
			apply(t, r.get(t, kind, "rbac-fencekit-selftest"))
		}
		st := serviceAccount(user, "rbac-fencekit-selftest")
		waitFor(t, "the selftest binding", func(context.Context) (bool, error) {
			return allowed(t, st, access{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: user}), nil
		})
		c := st.client(t)
		lease := fencedLease(t, user, "orders-writer", "system:serviceaccount:"+user+":orders-worker")
		taken := lease.DeepCopy()
		taken.Spec.HolderIdentity = ptr.To("selftest")
		refused(t, "the selftest ServiceAccount taking a workload's fenced Lease under its epoch", c.Update(ctx, taken),
			"only system:serviceaccount:"+user+":orders-worker, which acquired epoch 5, may renew or release it")
		refused(t, "the selftest ServiceAccount deleting a workload's fenced Lease", c.Delete(ctx, lease.DeepCopy()), "cannot delete resource \"leases\"")
		refused(t, "the selftest ServiceAccount creating a FencedResource", c.Create(ctx, &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: user}, Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer"}}),
			"cannot create resource \"fencedresources\"")
		checkAccess(t, st, nil, []access{
			{verb: "get", resource: "secrets", namespace: user},
			{verb: "create", group: rbacv1.GroupName, resource: "rolebindings", namespace: user},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: release, name: "fencekit-manager"},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "default"},
			{verb: "patch", group: "fencing.fencekit.io", resource: "fencedresources", subresource: "status", namespace: user},
			{verb: "create", resource: "pods", namespace: user},
		})
		unchanged(t, lease)
	})

	t.Run("namespace admin", func(t *testing.T) {
		user := env.Namespace(t)
		// What the admin ClusterRole aggregates (envtest runs no aggregation controller): edit's rules, which
		// include Leases, and admin's (RoleBindings).
		admin := bindRole(t, user, "admin", access{verb: "create", group: rbacv1.GroupName, resource: "rolebindings", namespace: user},
			"system:aggregate-to-edit", "system:aggregate-to-admin")
		c := admin.client(t)
		ns := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: user}, ns); err != nil {
			t.Fatal(err)
		}
		ns.Labels["kubernetes.io/metadata.name"] = "kube-system"
		refused(t, "a namespace admin relabelling its namespace as kube-system (which the webhook skips)", c.Update(ctx, ns), "cannot update resource \"namespaces\"")
		refused(t, "a namespace admin binding fencekit-elector to itself (a role it does not hold)", c.Create(ctx, roleBinding(user, "self-elector", "rbac-fencekit-elector", user, "admin")),
			"is attempting to grant RBAC permissions not currently held")
		refused(t, "a namespace admin switching the Lease policy to Audit",
			c.Patch(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fencekit-fenced-leases"}},
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"validationActions":["Audit"]}}`))),
			"cannot patch resource \"validatingadmissionpolicybindings\"")
		refused(t, "a namespace admin dropping its namespace from the object webhooks",
			c.Update(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fencekit-objects", ResourceVersion: "1"}}),
			"cannot update resource \"validatingwebhookconfigurations\"")
		// The admin's Lease rights are its namespace's (the Lease policy guards fenced ones); fencekit's
		// objects are not aggregated to it.
		checkAccess(t, admin, nil, []access{
			{verb: "update", group: "fencing.fencekit.io", resource: "fencedresources", namespace: user},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: release, name: "fencekit-manager"},
			{verb: "get", resource: "secrets", namespace: release, name: "rbac-fencekit-webhook-cert"},
		})
	})
}

// TestAttackerUncheckedNamespaces: the namespaces fencekit's webhook skips hold no FencedResource and no
// FencingPolicy, whoever asks (the policy has no break-glass: even the admin is refused) and however (a dry
// run, server-side apply).
func TestAttackerUncheckedNamespaces(t *testing.T) {
	_, release := installRBAC(t)
	ctx := t.Context()
	want := "FencedResources and FencingPolicies cannot be created or updated in namespaces that fencekit's admission webhook does not check: " + release + ", kube-system"
	// A new policy takes effect within about a second; until then the request reaches the webhooks.
	testenv.Eventually(t, "the unchecked-namespaces policy in effect", func() (bool, string) {
		probe := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "kube-system"},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "fencekit-manager"}}
		err := env.Client.Create(ctx, probe, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), want), fmt.Sprint(err)
	})
	for _, namespace := range []string{release, "kube-system"} {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: "unchecked", Namespace: namespace},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "fencekit-manager"}}
		refused(t, "the admin creating a FencedResource in "+namespace, env.Client.Create(ctx, fr.DeepCopy(), client.DryRunAll), want)
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fencing.fencekit.io/v1alpha1", "kind": "FencedResource",
			"metadata": map[string]any{"name": "unchecked", "namespace": namespace}, "spec": map[string]any{"leaseName": "fencekit-manager"}}}
		refused(t, "the admin applying a FencedResource in "+namespace,
			env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("attacker")), want)
		policy := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "unchecked", Namespace: namespace},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "fencekit-manager",
				Resources: []fencingv1alpha1.FencedObjects{{Group: "", Resource: "secrets"}}}}
		refused(t, "the admin creating a FencingPolicy in "+namespace+" (it could fence the operator's own objects)",
			env.Client.Create(ctx, policy, client.DryRunAll), want)
	}
}

// TestAttackerMetricsReader: a scraper bound to the chart's metrics-reader role may get the operator's
// /metrics and nothing else: no other method or path of the operator's metrics server, no object of the
// apiserver, no review that would let it check tokens or permissions; and a token the scraper holds for
// another audience, or a ServiceAccount without the role that every authenticated user's default roles
// let get /healthz or /version, reads no metrics.
func TestAttackerMetricsReader(t *testing.T) {
	r, release := installRBAC(t)
	prom := env.Namespace(t)
	scraper := env.ServiceAccountToken(t, prom, "prometheus")
	nosy := env.ServiceAccountToken(t, prom, "nosy")
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "attacker-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rbac-fencekit-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: prom}}}
	if err := env.Client.Create(t.Context(), crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })
	id := serviceAccount(prom, "prometheus")
	waitFor(t, "the scraper's binding", func(context.Context) (bool, error) { return allowedURL(t, id, "/metrics"), nil })

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(prom).CreateToken(t.Context(), "prometheus",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}, ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	otherAudience := tr.Status.Token

	opts := operatorOptions(t, r, release)
	opts.MetricsSecure, opts.MetricsAddr = true, "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t))
	opts.WebhookPort, opts.CertRotation, opts.ProbeAddr = 0, false, "0" // metrics only
	defer run(t, serviceAccount(release, "rbac-fencekit-manager"), opts)()
	base := "https://" + opts.MetricsAddr
	waitFor(t, "the secure metrics server", func(ctx context.Context) (bool, error) {
		code, _, err := get(ctx, base+"/metrics", scraper)
		return code == http.StatusOK, err
	})
	// No metrics to a token for another audience (controller-runtime's filter answers 500 when the TokenReview
	// does not authenticate it, 401 without a token), to a POST, or to a ServiceAccount without the role on
	// any spelling of the path (the server cleans a path by redirecting to it, and authorizes the target);
	// the metrics server serves nothing else, not even the paths every authenticated user may get from
	// the apiserver.
	for _, tc := range []struct {
		who, method, path, token string
		want                     []int
	}{
		{"the scraper with a token for another audience", http.MethodGet, "/metrics", otherAudience, []int{http.StatusUnauthorized, http.StatusInternalServerError}},
		{"the scraper posting", http.MethodPost, "/metrics", scraper, []int{http.StatusForbidden}},
		{"the scraper on the profiler", http.MethodGet, "/debug/pprof/", scraper, []int{http.StatusNotFound}},
		{"a ServiceAccount without the role", http.MethodGet, "/metrics", nosy, []int{http.StatusForbidden}},
		{"a ServiceAccount without the role, doubled slash", http.MethodGet, "//metrics", nosy, []int{http.StatusForbidden}},
		{"a ServiceAccount without the role, dot segment", http.MethodGet, "/./metrics", nosy, []int{http.StatusForbidden}},
		{"a ServiceAccount without the role, trailing slash", http.MethodGet, "/metrics/", nosy, []int{http.StatusNotFound}},
		{"a ServiceAccount without the role, upper case", http.MethodGet, "/METRICS", nosy, []int{http.StatusNotFound}},
		{"a ServiceAccount without the role on /healthz", http.MethodGet, "/healthz", nosy, []int{http.StatusNotFound}},
		{"a ServiceAccount without the role on /version", http.MethodGet, "/version", nosy, []int{http.StatusNotFound}},
	} {
		code, body, err := scrape(t.Context(), tc.method, base+tc.path, tc.token)
		if err != nil || !slices.Contains(tc.want, code) || strings.Contains(body, "controller_runtime_") {
			t.Errorf("%s: %s %s: %d (%v), want one of %v and no metrics", tc.who, tc.method, tc.path, code, err, tc.want)
		}
	}

	// The role is a cluster-wide non-resource rule: it also reads the apiserver's own /metrics (as every
	// Prometheus that scrapes the apiserver may), but nothing else there.
	scraperClient, err := kubernetes.NewForConfig(id.config())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/metrics/slis", "/debug/pprof/", "/livez/etcd", "/api/v1/namespaces/" + release + "/secrets"} {
		_, err := scraperClient.Discovery().RESTClient().Get().AbsPath(path).DoRaw(t.Context())
		if !apierrors.IsForbidden(err) {
			t.Errorf("the scraper getting %s from the apiserver: %v, want Forbidden", path, err)
		}
	}
	checkAccess(t, id, nil, []access{
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews"},
		{verb: "list", group: "coordination.k8s.io", resource: "leases"},
	})
}

// TestAttackerSecondRelease: two releases in one cluster; the operator of one must not write the other's
// election Lease, webhook configurations or certificate.
func TestAttackerSecondRelease(t *testing.T) {
	_, release := installRBAC(t)
	_, other := installRelease(t, "other")
	c := serviceAccount(release, "rbac-fencekit-manager").client(t)
	ctx := t.Context()

	election := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fencekit-manager", Namespace: other},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other-0"), LeaseDurationSeconds: ptr.To[int32](15)}}
	if err := env.Client.Create(ctx, election); err != nil {
		t.Fatal(err)
	}
	taken := election.DeepCopy()
	taken.Spec.HolderIdentity = ptr.To("rbac-0")
	refused(t, "one release's operator updating the other's election Lease", c.Update(ctx, taken.DeepCopy()), "cannot update resource \"leases\"")
	refused(t, "one release's operator patching the other's election Lease", c.Patch(ctx, taken, client.MergeFrom(election)),
		"may not change the spec of Lease "+other+"/fencekit-manager")
	pinned := election.DeepCopy()
	controllerutil.AddFinalizer(pinned, controllers.LeaseFinalizer)
	refused(t, "one release's operator pinning the other's election Lease with its finalizer",
		c.Patch(ctx, pinned, client.MergeFromWithOptions(election, client.MergeFromWithOptimisticLock{})),
		"may not add its finalizer fencing.fencekit.io/protect to Lease "+other+"/fencekit-manager")
	for _, name := range []string{"other-fencekit-validating-webhook", "other-fencekit-objects"} {
		refused(t, "one release's operator emptying "+name, c.Update(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"}}), "cannot update resource \"validatingwebhookconfigurations\"")
	}
	refused(t, "one release's operator reading the other's certificate Secret",
		c.Get(ctx, client.ObjectKey{Namespace: other, Name: "other-fencekit-webhook-cert"}, &corev1.Secret{}), "cannot get resource \"secrets\"")
}

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
		fm := client.FieldOwner(protocol.FieldManagerFor(6))
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
			c.Create(ctx, planted, client.FieldOwner(protocol.FieldManagerFor(1000))), "may create only its election Lease")
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
			return err == nil && len(vwc.Webhooks) == 2 && vwc.Webhooks[0].Name == user+".objects.fencing.fencekit.io" &&
				vwc.Webhooks[1].Name == "leases.fencing.fencekit.io", err
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
			{"the Lease webhook dropped", objectsKey.Name, "and the Lease webhook leases.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks = v.Webhooks[:1]
			}},
			{"the Lease webhook matching nothing", objectsKey.Name, "and the Lease webhook leases.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[1].MatchConditions[1].Expression = "false"
			}},
			{"the Lease webhook for every Lease", objectsKey.Name, "and the Lease webhook leases.fencing.fencekit.io", func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
				v.Webhooks[1].ObjectSelector = &metav1.LabelSelector{}
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
