package helm_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// identity is a ServiceAccount as the apiserver authenticates it.
type identity struct {
	user   string
	groups []string
}

// roleBinding binds ClusterRole role, in namespace, to ServiceAccount saNamespace/sa.
func roleBinding(namespace, name, role, saNamespace, sa string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: saNamespace}},
	}
}

func serviceAccount(namespace, name string) identity {
	return identity{
		user:   "system:serviceaccount:" + namespace + ":" + name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
}

// config is the admin config impersonating id: every request is authorized as id, by the apiserver's RBAC.
func (id identity) config() *rest.Config {
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: id.user, Groups: id.groups}
	return cfg
}

func (id identity) client(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(id.config(), client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// access is one request, as a SubjectAccessReview asks it.
type access struct {
	verb, group, resource, subresource, namespace, name string
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.subresource != "" {
		s += "/" + a.subresource
	}
	if a.name != "" {
		s += " " + a.name
	}
	if a.namespace != "" {
		return s + " in " + a.namespace
	}
	return s + " (all namespaces / cluster)"
}

// allowed asks the apiserver's authorizer whether id may perform a.
func allowed(t *testing.T, id identity, a access) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: id.user, Groups: id.groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource, Namespace: a.namespace, Name: a.name,
		},
	}}
	if err := env.Client.Create(t.Context(), sar); err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return sar.Status.Allowed
}

func checkAccess(t *testing.T, id identity, may, mayNot []access) {
	t.Helper()
	for _, a := range may {
		if !allowed(t, id, a) {
			t.Errorf("%s may not %v, but needs to", id.user, a)
		}
	}
	for _, a := range mayNot {
		if allowed(t, id, a) {
			t.Errorf("%s may %v, but must not", id.user, a)
		}
	}
}

func forbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: got %v, want Forbidden", what, err)
	}
}

// crdObject is an empty CustomResourceDefinition (the test scheme has no apiextensions types).
func crdObject() *unstructured.Unstructured {
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	return crd
}

// installRBAC applies the chart's identity and permissions (release "rbac" in a fresh namespace): the
// ServiceAccount, the ClusterRoles, Role and bindings, the certificate Secret, the Lease policy, the
// operator's policies and the (empty) object webhook configuration, and waits until the operator's
// policies are enforced, so that what the operator does afterwards is done under them.
func installRBAC(t *testing.T) (release rendered, namespace string) {
	t.Helper()
	return installRelease(t, "rbac")
}

// installRelease is installRBAC for a release of any name (a second release: its cluster-scoped objects
// are named after it).
func installRelease(t *testing.T, name string) (release rendered, namespace string) {
	t.Helper()
	namespace = env.Namespace(t)
	r := releaseObjects(t, name, namespace)
	applyKinds(t, r, accessKinds)
	// The object webhooks' configuration is created empty: it sends nothing anywhere until the operator
	// writes webhooks for FencingPolicies.
	objectsVWC := r.get(t, "ValidatingWebhookConfiguration", name+"-fencekit-objects")
	apply(t, objectsVWC)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), objectsVWC.DeepCopy()) })
	waitForOperatorPolicies(t, serviceAccount(namespace, name+"-fencekit-manager"), namespace, objectsVWC.GetName())
	return r, namespace
}

// TestChartRBAC proves the chart's permissions on the real apiserver by impersonation: the operator runs
// in-process as the chart's ServiceAccount and does its work (certificates, the webhook, the controllers),
// a workload ServiceAccount bound to fencekit-elector elects and writes fenced, and both are refused what they
// must not do.
func TestChartRBAC(t *testing.T) {
	r, release := installRBAC(t)
	op := serviceAccount(release, "rbac-fencekit-manager")
	user := env.Namespace(t) // a user's namespace, where FencedResources and their Leases live
	vwcName := "rbac-fencekit-validating-webhook"
	secretName := "rbac-fencekit-webhook-cert"

	t.Run("operator may", func(t *testing.T) {
		checkAccess(t, op, []access{
			{verb: "list", group: "fencing.fencekit.io", resource: "fencedresources"},
			{verb: "watch", group: "fencing.fencekit.io", resource: "fencedresources"},
			{verb: "get", group: "fencing.fencekit.io", resource: "fencedresources", namespace: user},
			{verb: "patch", group: "fencing.fencekit.io", resource: "fencedresources", subresource: "status", namespace: user},
			{verb: "list", group: "coordination.k8s.io", resource: "leases"},
			{verb: "watch", group: "coordination.k8s.io", resource: "leases"},
			{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: user},
			{verb: "patch", group: "coordination.k8s.io", resource: "leases", namespace: user},
			{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: release},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: release, name: operator.LeaseName},
			{verb: "create", resource: "events", namespace: user},
			{verb: "patch", group: "events.k8s.io", resource: "events", namespace: user},
			{verb: "list", resource: "secrets", namespace: release, name: secretName},
			{verb: "watch", resource: "secrets", namespace: release, name: secretName},
			{verb: "get", resource: "secrets", namespace: release, name: secretName},
			{verb: "update", resource: "secrets", namespace: release, name: secretName},
			{verb: "list", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations"},
			{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: vwcName},
			{verb: "get", resource: "namespaces", name: user},
			{verb: "list", resource: "namespaces"},
			{verb: "watch", resource: "namespaces"},
			{verb: "get", resource: "pods", namespace: user, name: "web-0"},
			{verb: "get", group: "apps", resource: "deployments", namespace: user, name: "web"},
		}, nil)
	})

	t.Run("operator may not", func(t *testing.T) {
		checkAccess(t, op, nil, []access{
			{verb: "get", resource: "secrets", namespace: user, name: "app-credentials"},
			{verb: "list", resource: "secrets", namespace: user},
			{verb: "list", resource: "secrets"},
			{verb: "get", resource: "secrets", namespace: release, name: "another-secret"},
			{verb: "list", resource: "secrets", namespace: release},
			{verb: "watch", resource: "secrets", namespace: release},
			{verb: "update", group: "fencing.fencekit.io", resource: "fencedresources", subresource: "status", namespace: user},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: user},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: release, name: "another-lease"},
			{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-system", name: "kube-controller-manager"},
			{verb: "create", resource: "secrets", namespace: release},
			{verb: "delete", resource: "secrets", namespace: release, name: secretName},
			{verb: "update", group: "fencing.fencekit.io", resource: "fencedresources", namespace: user},
			{verb: "create", group: "fencing.fencekit.io", resource: "fencedresources", namespace: user},
			{verb: "delete", group: "fencing.fencekit.io", resource: "fencedresources", namespace: user},
			{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: user},
			{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: user},
			{verb: "delete", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", name: "fencedresources.fencing.fencekit.io"},
			{verb: "update", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", name: "fencedresources.fencing.fencekit.io"},
			{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "someone-elses-webhook"},
			{verb: "delete", group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: vwcName},
			{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies", name: "fencekit-fenced-leases"},
			{verb: "create", resource: "pods", namespace: release},
			{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
			{verb: "impersonate", resource: "users"},
			{verb: "delete", resource: "namespaces", name: user},
			{verb: "list", resource: "pods", namespace: user},
			{verb: "update", group: "apps", resource: "deployments", namespace: user, name: "web"},
		})
		// And for real, through the impersonated client.
		c := op.client(t)
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-credentials", Namespace: user}, StringData: map[string]string{"password": "s3cr3t"}}
		if err := env.Client.Create(t.Context(), secret); err != nil {
			t.Fatal(err)
		}
		forbidden(t, "reading a Secret in another namespace", c.Get(t.Context(), client.ObjectKeyFromObject(secret), &corev1.Secret{}))
		forbidden(t, "listing Secrets of every namespace", c.List(t.Context(), &corev1.SecretList{}))
		crd := crdObject()
		crd.SetName("fencedresources.fencing.fencekit.io")
		forbidden(t, "deleting the FencedResource CRD", c.Delete(t.Context(), crd))
		forbidden(t, "creating a Lease in a user's namespace", c.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "orders-writer", Namespace: user}}))
	})

	t.Run("operator keeps its webhook certificate", func(t *testing.T) {
		// The chart's webhook configuration, applied only for this subtest: it points at a Service with no
		// pods and fails closed, so the other subtests must not see it.
		vwc := r.get(t, "ValidatingWebhookConfiguration", vwcName)
		apply(t, vwc)
		defer func() { _ = env.Client.Delete(context.Background(), vwc.DeepCopy()) }()
		checkCertRotation(t, op, r, release, secretName, vwcName)
	})

	// From here on the operator runs as the chart's ServiceAccount: it serves the FencedResource webhook that
	// envtest installed (every FencedResource write below goes through it) and runs its controllers.
	startChartOperator(t, op, r, release)

	t.Run("operator runs", func(t *testing.T) {
		// A fenced Lease as pkg/elector leaves it: the operator protects only Leases labelled fenced.
		lease := fencedLease(t, user, "orders-writer", "system:serviceaccount:"+user+":orders-worker")
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: user},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: lease.Name}}
		if err := env.Client.Create(t.Context(), fr); err != nil {
			t.Fatalf("declaring a FencedResource (admitted by the operator's webhook): %v", err)
		}
		// The replicas' election, on the Lease the chart lets the operator create in its namespace.
		waitFor(t, "the operator to elect itself leader", func(ctx context.Context) (bool, error) {
			var l coordinationv1.Lease
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: release, Name: operator.LeaseName}, &l)
			return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "", client.IgnoreNotFound(err)
		})
		// The controllers, with only the chart's permissions, protect the Lease and report status.
		waitFor(t, "the operator to put its finalizer on the bound Lease", func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease)
			return slices.Contains(lease.Finalizers, controllers.LeaseFinalizer), err
		})
		waitFor(t, "the operator to write the FencedResource's status", func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(fr), fr)
			// The Lease is at epoch 5 and the resource at 0: the conditions say so, which is a status write.
			return meta.FindStatusCondition(fr.Status.Conditions, fencingv1alpha1.ConditionLeaseFound) != nil && fr.Status.ObservedGeneration == fr.Generation, err
		})
		if err := env.Client.Delete(t.Context(), fr); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the operator to remove its finalizer once nothing is bound", func(ctx context.Context) (bool, error) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(lease), lease)
			return !slices.Contains(lease.Finalizers, controllers.LeaseFinalizer), err
		})
	})

	t.Run("fencekit-elector", func(t *testing.T) {
		checkElector(t, user)
	})
}

// startChartOperator runs the operator in-process as id with the chart's arguments, until the test ends. Its
// webhook serves where envtest's webhook configuration sends FencedResource admissions, with envtest's
// certificate (so no certificate rotation here: checkCertRotation covers it).
func startChartOperator(t *testing.T, id identity, r rendered, release string) {
	t.Helper()
	opts := operatorOptions(t, r, release)
	if !opts.LeaderElect || opts.LeaderElectionNamespace != release {
		t.Fatalf("the chart does not make the operator elect in its namespace: %+v", opts)
	}
	w := env.Environment.WebhookInstallOptions
	opts.WebhookHost, opts.WebhookPort, opts.WebhookCertDir = w.LocalServingHost, w.LocalServingPort, w.LocalServingCertDir
	opts.CertRotation, opts.ProbeAddr = false, "0"
	operatortest.StartWith(t, id.config(), opts)
}

// waitFor waits until cond holds (testenv's poller), reporting the last error cond returned.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	testenv.Eventually(t, what, func() (bool, string) {
		ok, err := cond(t.Context())
		return ok, fmt.Sprint(err)
	})
}

// checkElector binds fencekit-elector to a workload ServiceAccount the way the README tells users to (a
// RoleBinding in the workload's namespace), then runs pkg/elector and pkg/fencing as that ServiceAccount, with
// fence-on-acquire for FencedResources and for the objects of a FencingPolicy: the elector role lets it list
// the policies, and listing and patching the declared ConfigMaps is the workload's own RBAC (a Role of its
// own, as the chart README tells users).
func checkElector(t *testing.T, other string) {
	namespace := env.Namespace(t)
	bind := func(sa string) identity {
		if err := env.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: namespace}}); err != nil {
			t.Fatal(err)
		}
		rb := roleBinding(namespace, sa+"-fencekit", "rbac-fencekit-elector", namespace, sa) // release rbac's elector role
		if err := env.Client.Create(t.Context(), rb); err != nil {
			t.Fatal(err)
		}
		id := serviceAccount(namespace, sa)
		// The authorizer learns of the binding from its informer a moment later.
		waitFor(t, "the binding of "+sa+" to take effect", func(context.Context) (bool, error) {
			return allowed(t, id, access{verb: "update", group: "fencing.fencekit.io", resource: "fencedresources", namespace: namespace}), nil
		})
		return id
	}
	worker, intruder := bind("orders-worker"), bind("intruder")

	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: namespace},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer"}}
	if err := env.Client.Create(t.Context(), fr); err != nil {
		t.Fatal(err)
	}
	declared := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders-config", Namespace: namespace}}
	policy := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "orders-objects", Namespace: namespace},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "orders-writer", Resources: []fencingv1alpha1.FencedObjects{{Group: "", Resource: "configmaps"}}}}
	for _, o := range []client.Object{declared, policy} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	// The workload's own RBAC on the objects it declares (the elector role cannot know them).
	env.Grant(t, namespace, "orders-worker-configmaps", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "patch"}}}, worker.user)
	waitFor(t, "the workload's ConfigMap Role to take effect", func(context.Context) (bool, error) {
		return allowed(t, worker, access{verb: "patch", resource: "configmaps", namespace: namespace, name: declared.Name}), nil
	})

	wc := worker.client(t)
	cs, err := kubernetes.NewForConfig(worker.config())
	if err != nil {
		t.Fatal(err)
	}
	tokens := make(chan elector.Token, 1)
	e, err := elector.New(elector.Config{
		Client: cs, Namespace: namespace, Name: "orders-writer", Identity: "orders-worker-0",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		SafetyMargin: 200 * time.Millisecond, ReleaseOnCancel: ptr.To(true),
		PostAcquire: elector.JoinFences(fencing.FenceOnAcquire(wc), fencing.FenceObjectsOnAcquire(wc, wc)),
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			tokens <- tok
			<-ctx.Done()
		},
	}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var tok elector.Token
	select {
	case tok = <-tokens:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector, as a ServiceAccount bound to fencekit-elector, never started leading (the log shows whether it acquired the Lease and its fence-on-acquire failed)")
	}
	key := types.NamespacedName{Namespace: namespace, Name: "orders"}
	written, err := fencing.NewWriter(wc).Set(t.Context(), tok, key, map[string]any{"next-order": 42})
	if err != nil {
		t.Fatalf("the holder's fenced write, as a ServiceAccount bound to fencekit-elector: %v", err)
	}
	if written.Spec.Epoch != tok.Epoch {
		t.Errorf("stored epoch %d, want the token's %d", written.Spec.Epoch, tok.Epoch)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(declared), declared); err != nil {
		t.Fatal(err)
	}
	if got, want := declared.Annotations[fencingv1alpha1.ObjectEpochAnnotation], strconv.FormatInt(tok.Epoch, 10); got != want {
		t.Errorf("ConfigMap %s declared by FencingPolicy %s has epoch record %q after the acquisition, want %s: fence-on-acquire for objects did not raise it",
			declared.Name, policy.Name, got, want)
	}
	// The same RBAC does not make anyone a writer: the webhook (run with the chart's permissions) refuses a
	// write with the holder's token from another identity.
	if _, err := fencing.NewWriter(intruder.client(t)).Set(t.Context(), tok, key, map[string]any{"next-order": 0}); !fencing.IsNotHolder(err) {
		t.Errorf("a write with the holder's token by another ServiceAccount: got %v, want a not-holder refusal", err)
	}

	checkAccess(t, worker, []access{
		{verb: "get", group: "coordination.k8s.io", resource: "leases", namespace: namespace, name: "orders-writer"},
		{verb: "watch", group: "coordination.k8s.io", resource: "leases", namespace: namespace},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: namespace},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: namespace, name: "orders-writer"},
		{verb: "create", resource: "events", namespace: namespace},
		{verb: "patch", group: "fencing.fencekit.io", resource: "fencedresources", namespace: namespace, name: "orders"},
		{verb: "list", group: "fencing.fencekit.io", resource: "fencedresources", namespace: namespace},
		{verb: "list", group: "fencing.fencekit.io", resource: "fencingpolicies", namespace: namespace},
	}, []access{
		// Policies are the namespace owner's: a workload that wrote them could bind others' objects to its Lease.
		{verb: "create", group: "fencing.fencekit.io", resource: "fencingpolicies", namespace: namespace},
		{verb: "update", group: "fencing.fencekit.io", resource: "fencingpolicies", namespace: namespace, name: policy.Name},
		{verb: "delete", group: "fencing.fencekit.io", resource: "fencingpolicies", namespace: namespace, name: policy.Name},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: other},
		{verb: "delete", group: "coordination.k8s.io", resource: "leases", namespace: namespace, name: "orders-writer"},
		{verb: "delete", group: "fencing.fencekit.io", resource: "fencedresources", namespace: namespace, name: "orders"},
		{verb: "update", group: "fencing.fencekit.io", resource: "fencedresources", subresource: "status", namespace: namespace, name: "orders"},
		{verb: "get", resource: "secrets", namespace: namespace},
		{verb: "delete", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", name: "fencedresources.fencing.fencekit.io"},
		{verb: "update", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies", name: "fencekit-fenced-leases"},
	})
	forbidden(t, "a worker reading Secrets", wc.List(t.Context(), &corev1.SecretList{}, client.InNamespace(namespace)))
	forbidden(t, "a worker deleting the FencedResource", wc.Delete(t.Context(), written))
	forbidden(t, "a worker electing in another namespace", wc.Create(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: other}}))

	// The reference worker users copy (examples/worker), as a process authorized as the same ServiceAccount.
	runExampleWorker(t, worker, namespace, "inventory-writer", "inventory", 2)
}
