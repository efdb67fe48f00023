//go:build openholes

package admission_test

// Round 6 of the independent attacker: what is still open. Each test asserts the invariant it tries to
// break: it fails while the attack works. Run with
//
//	go test -tags openholes -count=1 -run 'TestRound6' -v ./test/admission/

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
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

// TestRound6HoldLocksOutControllerStatus: attack on "nothing a non-holder writes locks the cluster's own
// controllers out of their normal writes", by a user with RBAC on the objects only. The user adds a free
// finalizer to the holder's Deployment between the holder's read and its compare-and-swap Update through
// NewClient. The Update loses (409) and NewClient arms the hold (hold-at-epoch at the current epoch) with
// the token, so that the holder's retry wins. While the hold stands, every write without the token is
// refused, the Deployment controller's status writes included; it stands until the holder's next write to
// that object. A holder that does not write that object again (its retry found nothing left to do, it
// moved on) leaves the Deployment controller locked out for as long as the Lease is live. The Deployment
// controller's status update after the conflict must be admitted.
func TestRound6HoldLocksOutControllerStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	hc, read := deploymentHolder(t, testenv.Deployment(ns, "app"), "editor", admission.DeploymentControllerUser)
	stale := read()
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/x"]}}`)))
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	stale.Spec.Replicas = ptr.To(int32(2))
	err := hc.Update(ctx, stale)
	t.Logf("the holder's Update with the resourceVersion it read before the finalizer: %v; stored annotations %v", err, read().Annotations)
	if !apierrors.IsConflict(err) {
		t.Fatalf("want the holder's update to lose its compare-and-swap, got %v", err)
	}
	dc := env.ClientAs(t, admission.DeploymentControllerUser)
	for i, wait := range []time.Duration{0, 3 * time.Second} {
		time.Sleep(wait)
		d := read()
		d.Status.ObservedGeneration = d.Generation
		d.Status.Replicas = int32(i + 1)
		err := retryRBAC(t, "the Deployment controller's status update", func() error { return dc.Status().Update(ctx, d) })
		t.Logf("the Deployment controller's status update %s after the holder's conflict: %v", wait, err)
		if err != nil {
			t.Errorf("the Deployment controller's status update, %s after a user's free finalizer made the holder's update lose and arm its hold: %v", wait, err)
		}
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
		return c.SubResource("scale").Patch(ctx, dep, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n))))
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

// TestRound6FinalizerRemovalUnderAStormDuringDeletion: attack on I2 (headroom), by a user with RBAC on
// labels only. held() holds nothing on an object being deleted, but a FencedResource's labels stay free
// while it is being deleted (finalizers can no longer be added, labels can). The holder deleted its
// FencedResource, which its own finalizer (its cleanup) keeps; it now removes that finalizer with
// NewClient's compare-and-swap Update (read, remove, update; again on a conflict, which arms the hold), for
// up to 5 s, while a user relabels the resource from two goroutines (logged: a race, won or lost by the
// holder's request rate). Asserted: with the holder's hold armed, as NewClient arms it after a lost
// compare-and-swap, a relabel without the token must wait (I2: the holder's next write of any kind).
func TestRound6FinalizerRemovalUnderAStormDuringDeletion(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "relabeller")
	tok := holder.Acquire(t, ns, "l", 1)
	w := fencing.NewWriter(holder.Client)
	relabeller := unthrottled(t, "relabeller")
	removeFinalizer := func(hc client.Client, key types.NamespacedName) (time.Duration, int, error) {
		fenced := fencing.NewClient(hc, tokenOf(tok))
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start, tries := time.Now(), 0
		for {
			tries++
			var fr fencingv1alpha1.FencedResource
			err := hc.Get(rctx, key, &fr)
			if err == nil {
				fr.Finalizers = nil
				err = fenced.Update(rctx, &fr)
			}
			if err == nil || !apierrors.IsConflict(err) || rctx.Err() != nil {
				return time.Since(start), tries, err
			}
		}
	}
	for _, c := range []struct {
		name    string
		storm   bool
		holder  client.Client
		limited string
	}{
		{"control", false, holder.Client, "client-go's default limiter (5 QPS, burst 10)"},
		{"target", true, holder.Client, "client-go's default limiter (5 QPS, burst 10)"},
		{"target-unthrottled", true, unthrottled(t, holder.User), "no client-side limiter"},
	} {
		name := c.name
		key := declare(t, ns, name, "l")
		if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
			return w.Set(ctx, tok, key, map[string]any{"v": 1})
		}); err != nil {
			t.Fatal(err)
		}
		if err := mergePatch(t, holder.Client, key, `{"metadata":{"finalizers":["example.com/cleanup"]}}`, testenv.Presenting(1)); err != nil {
			t.Fatalf("the holder's finalizer: %v", err)
		}
		if err := w.Delete(ctx, tok, key); err != nil {
			t.Fatalf("the holder's delete: %v", err)
		}
		var stop func()
		admitted := &atomic.Int64{}
		if c.storm {
			admitted, stop = stormAtLeast(t, 2, 20, func(ctx context.Context, g, i int) error {
				return relabeller.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
					client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"g%d":"%d"}}}`, g, i))))
			})
		}
		before := admitted.Load()
		took, tries, err := removeFinalizer(c.holder, key)
		during := admitted.Load() - before
		if stop != nil {
			stop()
		}
		t.Logf("%s (being deleted; the holder's client has %s): the holder's removal of its finalizer took %s and %d tries, %d relabels admitted meanwhile: %v",
			name, c.limited, took.Round(time.Millisecond), tries, during, round6Short(err))
	}
	// The invariant itself, deterministically: the holder's hold armed on its FencedResource being deleted
	// (as NewClient arms it after losing a compare-and-swap), a relabel without the token must wait.
	key := declare(t, ns, "held", "l")
	if _, err := w.Set(ctx, tok, key, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	if err := mergePatch(t, holder.Client, key, `{"metadata":{"finalizers":["example.com/cleanup"]}}`, testenv.Presenting(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, tok, key); err != nil {
		t.Fatal(err)
	}
	if err := mergePatch(t, holder.Client, key, `{"metadata":{"annotations":{"fencing.fencekit.io/hold-at-epoch":"1"}}}`, testenv.Presenting(1)); err != nil {
		t.Fatalf("the holder arms its hold on its FencedResource being deleted: %v", err)
	}
	err := mergePatch(t, relabeller, key, `{"metadata":{"labels":{"x":"1"}}}`)
	t.Logf("held (being deleted, annotations %v): a relabel without the token: %v", get(t, key).Annotations, err)
	if err == nil {
		t.Errorf("a relabel without the token was admitted on the holder's FencedResource being deleted while its hold (the Lease's epoch) was armed: the holder's compare-and-swap removal of its finalizer can be starved (I2)")
	}
	_ = mergePatch(t, holder.Client, key, `{"metadata":{"finalizers":null}}`, testenv.Presenting(1))
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
	fr, err := w.Set(ctx, tok, key, map[string]any{"v": 2})
	t.Logf("the holder's Writer.Set in terminating namespace %s: %v", ns, err)
	if err == nil {
		t.Errorf("the holder's write to FencedResource %s was admitted (data now %s) in a terminating namespace: the namespace controller will delete it (nothing is lost)", key, fr.Spec.Data.Raw)
	}
	// The namespace controller's delete, as it will come, is admitted while the Lease is live.
	nc := env.ClientAs(t, admission.NamespaceControllerUser)
	derr := retryRBAC(t, "the namespace controller's delete", func() error {
		return nc.Delete(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}, client.DryRunAll)
	})
	t.Logf("the namespace controller's delete (dry run) of the holder's FencedResource: %v", derr)
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
