package admission_test

// Round 6 of the independent attacker: the five attacks that were closed after the others (decision
// 0037). Each test asserts the invariant the attack tried to break.

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round6Policy creates FencingPolicy ns/name for lease, fencing deployments and pods labelled team=team.
func round6Policy(t *testing.T, ns, name, lease, team string) {
	t.Helper()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: []fencingv1alpha1.FencedObjects{
			{Group: "apps", Resource: "deployments", Selector: sel}, {Resource: "pods", Selector: sel}}}}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating FencingPolicy %s/%s: %v", ns, name, err)
	}
	testenv.Eventually(t, "the webhook enforces FencingPolicy "+name, func() (bool, string) {
		probe := testenv.Deployment(ns, "probe-"+team)
		probe.Labels = map[string]string{"team": team}
		err := env.Client.Create(t.Context(), probe, client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
}

// TestRound6DisjointPoliciesLockOutForeignSubresources: attack on "nothing locks the holder (or the
// cluster's controllers) out", by an admin configuration the design recommends. Two FencingPolicies of one
// namespace fence Deployments and Pods for two Leases, with disjoint selectors (team=a, team=b: the
// overlap check admits them, "give both selectors a matchLabels key with different values"). A Scale or a
// Binding carries no labels, so Covered counts every policy naming the resource as covering it, and the
// object webhook refuses a write two policies of different Leases cover. The holder of lease-a then scales
// its own Deployment (team=a) through deployments/scale with its token, and the scheduler binds a Pod of
// team=a: both must be admitted (I2 headroom, and the cluster's controllers' normal writes).
func TestRound6DisjointPoliciesLockOutForeignSubresources(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "team-a")
	other := newWorker(t, ns, "team-b")
	env.Grant(t, ns, "workloads", []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/scale"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/binding", "bindings"}, Verbs: []string{"*"}},
	}, holder.User, other.User, "system:kube-scheduler")
	round6Policy(t, ns, "team-a", "lease-a", "a")
	round6Policy(t, ns, "team-b", "lease-b", "b")
	tok := holder.Acquire(t, ns, "lease-a", 1)
	other.Acquire(t, ns, "lease-b", 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))

	dep := testenv.Deployment(ns, "app")
	dep.Labels = map[string]string{"team": "a"}
	if err := retryRBAC(t, "the holder's Deployment", func() error { return fenced.Create(ctx, dep) }); err != nil {
		t.Fatal(err)
	}
	err := fenced.SubResource("scale").Patch(ctx, dep, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":3}}`)))
	t.Logf("the holder of lease-a scales its Deployment (team=a) through deployments/scale with its token: %v", err)
	if err != nil {
		t.Errorf("the holder's scale of its own Deployment, with a second policy of another Lease on team=b (I2: the holder's next write must not fail): %v", err)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: map[string]string{"team": "a"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if err := fenced.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	scheduler := env.ClientAs(t, "system:kube-scheduler")
	err = retryRBAC(t, "the scheduler's binding", func() error {
		return scheduler.SubResource("binding").Create(ctx, pod, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Target: corev1.ObjectReference{Kind: "Node", Name: "node-a"}})
	})
	t.Logf("the scheduler binds Pod p (team=a): %v", err)
	if err != nil {
		t.Errorf("the scheduler's binding of a fenced Pod, with a second policy of another Lease on team=b (the cluster's controllers' normal writes): %v", err)
	}
}

// TestRound6SelectorLeavesForeignRoutesCovered: attack on "nothing locks the cluster's own controllers
// out of their normal writes", with a policy that fences only the Deployments and Pods labelled team=a. A
// Scale or an Eviction carries no labels of its object, so Covered counts it as covered by every policy
// naming the resource, whatever the selector: the Deployment and the Pod of team=b, which no policy
// selects, are decided as fenced objects on those routes. The horizontal-pod-autoscaler (a
// kube-controller-manager ServiceAccount) scales the unfenced Deployment through deployments/scale, a user
// scales it (kubectl scale), a user adds an ephemeral container to the unfenced Pod (kubectl debug: that
// request carries the whole Pod, labels included, yet foreign() counts it with Scale and Eviction), and a
// user evicts the unfenced Pod (kubectl drain); all must be admitted: the objects are not fenced.
func TestRound6SelectorLeavesForeignRoutesCovered(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const hpa = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
	env.Grant(t, ns, "workloads", []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/scale"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/eviction", "pods/ephemeralcontainers"}, Verbs: []string{"*"}},
	}, "user", hpa)
	round6Policy(t, ns, "team-a", "lease-a", "a")
	user := env.ClientAs(t, "user")
	dep := testenv.Deployment(ns, "other")
	dep.Labels = map[string]string{"team": "b"}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other", Labels: map[string]string{"team": "b"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if err := retryRBAC(t, "the user's unfenced Deployment", func() error { return user.Create(ctx, dep) }); err != nil {
		t.Fatalf("creating a Deployment no policy selects: %v", err)
	}
	if err := user.Create(ctx, pod); err != nil {
		t.Fatalf("creating a Pod no policy selects: %v", err)
	}
	scale := func(c client.Client, n int) error {
		return c.SubResource("scale").Patch(ctx, testenv.Deployment(ns, "other"), client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))))
	}
	for _, w := range []struct {
		what  string
		write func() error
	}{
		{"the horizontal-pod-autoscaler scales Deployment other (team=b) through deployments/scale", func() error { return scale(env.ClientAs(t, hpa), 2) }},
		{"a user scales Deployment other (team=b) through deployments/scale", func() error { return scale(user, 3) }},
		{"a user adds an ephemeral container to Pod other (team=b) (kubectl debug; the request carries the Pod and its labels)", func() error {
			p := testenv.Read[corev1.Pod](t, env.Client, ns, "other")
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
				EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}})
			return user.SubResource("ephemeralcontainers").Update(ctx, p)
		}},
		{"a user evicts Pod other (team=b)", func() error {
			return user.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}})
		}},
	} {
		err := retryRBAC(t, w.what, w.write)
		t.Logf("%s: %v", w.what, err)
		if err != nil {
			t.Errorf("%s, which no policy selects: %v", w.what, err)
		}
	}
}

// TestRound6HolderClockBehindOpensDeletes: attack on I4 (delete semantics) and I1, by a user with delete
// RBAC on FencedResources, while the holder leads with a wall clock 60 s behind the webhook's (an NTP
// fault on its node). The elector never compares renewTime with another node's wall clock (elector.md:
// standbys time the renewals they observe, so offsets do not matter) and keeps leading; the webhook
// judges "live" by renewTime + leaseDurationSeconds against its own clock, and once a Lease is not live
// anyone with RBAC may delete. The holder renews (renewTime = its clock); the user deletes the holder's
// FencedResource. The delete must be refused while the holder leads, and the holder's own write admitted.
func TestRound6HolderClockBehindOpensDeletes(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantFencedResources(t, ns, holder.User, "cleaner")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "orders", "l")
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	// The holder's renewal, stamped by its clock, 60 s behind.
	var lease coordinationv1.Lease
	if err := holder.Client.Get(ctx, tok.Lease, &lease); err != nil {
		t.Fatal(err)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-60 * time.Second)}
	if err := holder.Client.Update(ctx, &lease, testenv.Presenting(1)); err != nil {
		t.Fatalf("the holder's renewal: %v", err)
	}
	_, werr := w.Set(ctx, tok, key, map[string]any{"v": 2})
	t.Logf("the holder's write right after its renewal (clock 60 s behind, lease duration %ds): %v", *lease.Spec.LeaseDurationSeconds, werr)
	if werr != nil {
		t.Errorf("the leading holder's write is refused because its renewTime is 60 s behind the webhook's clock: %v", werr)
	}
	cleaner := env.ClientAs(t, "cleaner")
	derr := retryRBAC(t, "the cleaner's delete", func() error {
		return cleaner.Delete(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}})
	})
	t.Logf("a user without the token deletes the leading holder's FencedResource: %v", derr)
	if derr == nil {
		t.Errorf("a user without the token deleted FencedResource %s while its holder leads (renewing with a clock 60 s behind the webhook's) (I4)", key)
	}
}

// TestRound6WriteInATerminatingNamespace: attack on "nothing is lost", by whoever may delete the
// namespace. The rule refuses a write with the token that changes the content of an object being deleted
// (it would be acknowledged, then go with the object), but it reads the object's own deletionTimestamp
// only. Once the namespace is terminating, the namespace controller deletes every object in it, whatever
// its Lease (admitted for that controller). The holder's Writer.Set on its FencedResource in a terminating
// namespace must be refused (as for an object being deleted), not acknowledged and then lost.
// (envtest runs no namespace controller: the namespace stays Terminating.)
func TestRound6WriteInATerminatingNamespace(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User)
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "orders", "l")
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	env.Grant(t, ns, "nc", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedresources"}, Verbs: []string{"delete"}}}, admission.NamespaceControllerUser)
	if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the namespace is terminating", func() (bool, string) {
		got := testenv.Read[corev1.Namespace](t, env.Client, "", ns)
		return got.DeletionTimestamp != nil, string(got.Status.Phase)
	})
	var err error
	var fr *fencingv1alpha1.FencedResource
	testenv.Eventually(t, "the webhook's copy of the namespaces shows it terminating", func() (bool, string) {
		fr, err = w.Set(ctx, tok, key, map[string]any{"v": 2})
		return err != nil, testenv.ErrString(err)
	})
	t.Logf("the holder's Writer.Set in terminating namespace %s: %v", ns, err)
	if fencing.ReasonOf(err) != protocol.ReasonInvalid {
		t.Errorf("the holder's write to FencedResource %s in a terminating namespace: %v (data %v), want it refused as invalid: the namespace controller will delete it (nothing is lost)", key, err, fr)
	}
	// The namespace controller's delete, as it will come, is admitted while the Lease is live.
	nc := env.ClientAs(t, admission.NamespaceControllerUser)
	derr := retryRBAC(t, "the namespace controller's delete", func() error {
		return nc.Delete(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}, client.DryRunAll)
	})
	t.Logf("the namespace controller's delete (dry run) of the holder's FencedResource: %v", derr)
	if derr != nil {
		t.Errorf("the namespace controller's delete of FencedResource %s in its terminating namespace: %v", key, derr)
	}
}

// TestRound6EvictionUpdatesACoveredPDB: attack on "nothing locks the cluster's own machinery out of its
// normal writes", with a policy that fences PodDisruptionBudgets. Evicting a running Pod that a PDB
// selects makes the apiserver itself decrement the PDB's status.disruptionsAllowed (the eviction handler's
// loopback UpdateStatus, as system:apiserver) before it deletes the Pod. That user is neither a cluster
// controller nor the holder: its status write has no token. The Pod is not fenced (pods are not declared),
// the PDB allows one disruption (its status written by the disruption controller, free); a user's eviction
// of the Pod, and the holder's own eviction presenting its token, must go through.
func TestRound6EvictionUpdatesACoveredPDB(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	const disruption = "system:serviceaccount:kube-system:disruption-controller"
	env.Grant(t, ns, "pdbs", []rbacv1.PolicyRule{
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets", "poddisruptionbudgets/status"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"pods", "pods/eviction"}, Verbs: []string{"*"}},
	}, holder.User, "user", disruption)
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Group: "policy", Resource: "poddisruptionbudgets"}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the webhook enforces the policy", func() (bool, string) {
		probe := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
		err := env.Client.Create(ctx, probe, client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	tok := holder.Acquire(t, ns, appLease, 1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if err := retryRBAC(t, "the holder's PDB", func() error { return fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, pdb) }); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	// The disruption controller's status: one disruption allowed.
	dc := env.ClientAs(t, disruption)
	if err := retryRBAC(t, "the disruption controller's status", func() error {
		got := testenv.Read[policyv1.PodDisruptionBudget](t, env.Client, ns, "web")
		got.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: got.Generation, DisruptionsAllowed: 1, CurrentHealthy: 1,
			DesiredHealthy: 0, ExpectedPods: 1}
		return dc.Status().Update(ctx, got)
	}); err != nil {
		t.Fatalf("the disruption controller's status write: %v", err)
	}
	user := env.ClientAs(t, "user")
	err := retryRBAC(t, "the eviction", func() error {
		return user.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0"}})
	})
	t.Logf("a user evicts Pod web-0, which the holder's PDB allows (disruptionsAllowed 1): %v", err)
	if err != nil {
		t.Errorf("the eviction of an unfenced Pod under a fenced PDB that allows it failed: %v", err)
	}
	// The holder itself, presenting its token on the eviction (the apiserver's PDB write carries none).
	herr := retryRBAC(t, "the holder's eviction", func() error {
		return holder.Client.SubResource("eviction").Create(ctx, pod, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-0"}},
			client.FieldOwner(tok.FieldManager()))
	})
	t.Logf("the holder evicts Pod web-0 with its token: %v", herr)
	if herr != nil {
		t.Errorf("the holder's eviction, with its token, of an unfenced Pod under its PDB that allows it failed: %v", herr)
	}
}
