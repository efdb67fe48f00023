package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

const (
	leaseName  = "attack"
	policyName = "attack"
	// worldLabel marks the world's objects; coverageLabel is the label the FencingPolicy selects
	// ConfigMaps by, and declaredLabel marks the attackers' declarations.
	worldLabel    = "attack.fencekit.io/world"
	coverageLabel = "app"
	coverageValue = "fenced"
	declaredLabel = "attack.fencekit.io/declared"
	holderName    = "holder"
	podImage      = "registry.k8s.io/pause:3.10"
)

var (
	gvrConfigMaps      = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	gvrPods            = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	gvrFencedResources = fencingv1alpha1.GroupVersion.WithResource("fencedresources")
)

// gvrOf is the resource of a world object's kind.
func gvrOf(resource string) schema.GroupVersionResource {
	switch resource {
	case "configmaps":
		return gvrConfigMaps
	case "pods":
		return gvrPods
	}
	return gvrFencedResources
}

// actor is a user the attack writes as.
type actor struct {
	name, user string
	groups     []string
	// gc is set for the garbage collector.
	gc  bool
	cfg *rest.Config
	c   client.Client
	dyn dynamic.Interface
}

// userClients returns a client and a dynamic client authenticated as user, without client-side rate
// limiting (the loops write as fast as the apiserver answers).
func userClients(t *testing.T, user string, groups ...string) (*rest.Config, client.Client, dynamic.Interface) {
	t.Helper()
	_, cfg, err := env.UserClient(user, groups...)
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c, dyn
}

// world is one run's namespace, Lease, holder, objects and actors.
type world struct {
	t      *testing.T
	ns     string
	routes []route
	admin  dynamic.Interface

	holderUser string
	holderCfg  *rest.Config
	holderC    client.Client
	holder     *holderRun // the elector that holds the Lease
	electors   int

	actors map[string]*actor
	gc     bool
}

// objectRules lets a user write every discovered route of the covered resources in the namespace, so that
// what the attack sees refused is fencekit's doing, not RBAC's.
func objectRules(routes []route) []rbacv1.PolicyRule {
	byGroup := map[string][]string{}
	for _, r := range routes {
		name := r.gvr.Resource
		if r.sub != "" {
			name += "/" + r.sub
		}
		if !slices.Contains(byGroup[r.gvr.Group], name) {
			byGroup[r.gvr.Group] = append(byGroup[r.gvr.Group], name)
		}
	}
	var rules []rbacv1.PolicyRule
	for _, g := range []string{"", fencingv1alpha1.GroupVersion.Group} {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{g}, Resources: byGroup[g], Verbs: []string{"*"}})
	}
	return rules
}

// newWorld builds the world: see the package documentation.
func newWorld(t *testing.T, routes []route, gc bool) *world {
	t.Helper()
	ctx := t.Context()
	w := &world{t: t, ns: env.Namespace(t), routes: routes, actors: map[string]*actor{}, gc: gc}
	var err error
	if w.admin, err = dynamic.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	// A default ServiceAccount for the Pod (no serviceaccount controller runs).
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "default"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	holder := env.NewWorker(t, w.ns, holderName)
	other := env.NewWorker(t, w.ns, "other")
	w.holderUser = holder.User
	w.holderCfg, w.holderC, _ = userClients(t, holder.User)
	users := map[string][]string{
		actorEditor:    {"editor"},
		actorGitOps:    {"system:serviceaccount:argocd:argocd-application-controller", "system:serviceaccounts", "system:serviceaccounts:argocd"},
		actorGC:        {"system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccounts", "system:serviceaccounts:kube-system"},
		actorScheduler: {"system:kube-scheduler"},
		actorDeploy:    {"system:serviceaccount:kube-system:deployment-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system"},
		actorKCM:       {"system:kube-controller-manager"},
		actorKubelet:   {"system:node:" + kubeletNode, "system:nodes"},
		actorStale:     {holder.User},
		actorOther:     {other.User},
	}
	var granted []string
	for name, u := range users {
		a := &actor{name: name, user: u[0], groups: u[1:]}
		a.gc = name == actorGC
		a.cfg, a.c, a.dyn = userClients(t, a.user, a.groups...)
		w.actors[name] = a
		if !slices.Contains(granted, a.user) {
			granted = append(granted, a.user)
		}
	}
	slices.Sort(granted)
	env.Grant(t, w.ns, "attack-objects", objectRules(routes), granted...)
	env.Grant(t, w.ns, "attack-leases", leaseRules, granted...)
	env.Grant(t, w.ns, "attack-policy-reader", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"get", "list", "watch"}}}, holder.User)
	for _, u := range granted {
		w.waitRBAC(u, "", "pods", "binding")
		w.waitRBAC(u, fencingv1alpha1.GroupVersion.Group, "fencedresources", "")
	}

	// Before any policy covers them: the GitOps tool applies a ConfigMap (its entry owns data.seed), the
	// editor a ConfigMap of its own that no policy covers (the bait for owner references).
	gitops := w.actors[actorGitOps]
	if err := w.gitopsApply(ctx, "cm-gitops"); err != nil {
		t.Fatalf("the GitOps tool applying cm-gitops: %v", err)
	}
	bait := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "bait"}, Data: map[string]string{"bait": "1"}}
	if err := w.actors[actorEditor].c.Create(ctx, bait); err != nil {
		t.Fatalf("the editor creating its bait: %v", err)
	}
	// The GitOps tool declares the FencedResources (free).
	for _, name := range fencedResources {
		if err := gitops.c.Create(ctx, w.declaration(name)); err != nil {
			t.Fatalf("declaring FencedResource %s: %v", name, err)
		}
	}
	w.declarePolicy()

	// The holder acquires at epoch 1 (a Worker, fence-on-acquire declared and run), writes the world, and
	// releases; an elector at its defaults then acquires at epoch 2, so that the stale holder has an
	// earlier epoch from the first step on.
	holder.Fences = protocol.Fences{FencedResources: true, Objects: true}
	holder.Client = w.holderC
	tok := holder.Acquire(t, w.ns, leaseName, 1)
	if err := elector.JoinFences(fencing.FenceOnAcquire(w.holderC), fencing.FenceObjectsOnAcquire(w.holderC, w.holderC)).Raise(ctx, tok); err != nil {
		t.Fatalf("fence-on-acquire at epoch 1: %v", err)
	}
	w.writeWorld(tok)
	holder.Release(t, tok)
	if _, err := w.acquire(false); err != nil {
		t.Fatalf("the first elector of the holder: %v", err)
	}
	return w
}

// gitopsApply is the GitOps tool's server-side apply of a world ConfigMap with its data seed.
func (w *world) gitopsApply(ctx context.Context, name string) error {
	body, err := json.Marshal(w.configMap(name, map[string]string{"seed": "gitops"}))
	if err != nil {
		return err
	}
	return w.actors[actorGitOps].c.Patch(ctx, w.configMap(name, nil), client.RawPatch(types.ApplyPatchType, body), client.FieldOwner("argocd-controller"))
}

// waitRBAC waits until user may create resource/sub (group) in the namespace.
func (w *world) waitRBAC(user, group, resource, sub string) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: w.ns, Verb: "create", Group: group, Resource: resource, Subresource: sub}}}
		if err := env.Client.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	})
	if err != nil {
		w.t.Fatalf("RBAC for %s on %s/%s never took effect: %v", user, resource, sub, err)
	}
}

// configMap is a world ConfigMap: labelled for the policy and as the world's.
func (w *world) configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{coverageLabel: coverageValue, worldLabel: "true"}},
		Data:       data}
}

// pod is the world's Pod: it never runs (no kubelet), and requests a little CPU so that a resize has
// something to change.
func (w *world) pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{worldLabel: "true"}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "app", Image: podImage, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}}}}
}

// declaration is a world FencedResource bound to the Lease, without data.
func (w *world) declaration(name string) *fencingv1alpha1.FencedResource {
	return &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{worldLabel: "true"}},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: leaseName}}
}

// declarePolicy creates the FencingPolicy (ConfigMaps labelled app=fenced, every Pod) and waits until the
// webhook enforces it and the operator has recorded its coverage.
func (w *world) declarePolicy() {
	t, ctx := w.t, w.t.Context()
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: policyName},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: leaseName, Resources: []fencingv1alpha1.FencedObjects{
			{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{coverageLabel: coverageValue}}},
			{Resource: "pods"},
		}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("creating FencingPolicy %s: %v", policyName, err)
	}
	testenv.Eventually(t, "the webhook refuses a tokenless write of a covered ConfigMap and Pod", func() (bool, string) {
		err := env.Client.Create(ctx, w.configMap("probe", nil), client.DryRunAll)
		if !fencing.IsTokenMissing(err) {
			return false, "ConfigMap: " + testenv.ErrString(err)
		}
		err = env.Client.Create(ctx, w.pod("probe"), client.DryRunAll)
		return fencing.IsTokenMissing(err), "Pod: " + testenv.ErrString(err)
	})
	testenv.Eventually(t, "the operator records the policy's coverage", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, err.Error()
		}
		return p.Status.CoverageGeneration == p.Generation, fmt.Sprintf("generation %d, coverage generation %d", p.Generation, p.Status.CoverageGeneration)
	})
}

// writeWorld writes the holder's objects with tok.
func (w *world) writeWorld(tok elector.Token) {
	t, ctx := w.t, w.t.Context()
	for _, name := range fencedResources {
		if _, err := fencing.NewWriter(w.holderC).Set(ctx, tok, w.key(name), map[string]any{"v": "holder", "name": name}); err != nil {
			t.Fatalf("the holder writing FencedResource %s: %v", name, err)
		}
	}
	fc := fencing.NewClient(w.holderC, tokenFunc(tok))
	for _, name := range configMaps {
		if name == "cm-gitops" || name == dependentName {
			continue
		}
		if err := fc.Create(ctx, w.configMap(name, map[string]string{"v": "holder"})); err != nil {
			t.Fatalf("the holder creating ConfigMap %s: %v", name, err)
		}
	}
	if err := fc.Patch(ctx, w.configMap("cm-gitops", nil), client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"holder"}}`))); err != nil {
		t.Fatalf("the holder writing cm-gitops: %v", err)
	}
	if err := w.createDependent(fc); err != nil {
		t.Fatal(err)
	}
	if err := fc.Create(ctx, w.pod("pod-0")); err != nil {
		t.Fatalf("the holder creating Pod pod-0: %v", err)
	}
}

// createDependent creates the dependent ConfigMap, owned by the owner ConfigMap, with the fenced client fc.
func (w *world) createDependent(fc client.Client) error {
	ctx := w.t.Context()
	var owner corev1.ConfigMap
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: ownerName}, &owner); err != nil {
		return fmt.Errorf("reading the owner: %w", err)
	}
	dep := w.configMap(dependentName, map[string]string{"v": "holder"})
	dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: ownerName, UID: owner.UID}}
	if err := fc.Create(ctx, dep); err != nil {
		return fmt.Errorf("the holder creating the dependent ConfigMap: %w", err)
	}
	return nil
}

func (w *world) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: w.ns, Name: name}
}

func tokenFunc(tok elector.Token) fencing.TokenFunc { return func() elector.Token { return tok } }

// token is the holder's current token (the zero Token if its elector does not lead).
func (w *world) token() elector.Token { return w.holder.e.Token() }

// fenced is the holder's fenced client with its current token.
func (w *world) fenced() client.Client { return fencing.NewClient(w.holderC, w.token) }

// isWorldName reports whether name is one of the world's objects of resource.
func isWorldName(resource, name string) bool {
	switch resource {
	case "configmaps":
		return slices.Contains(configMaps, name)
	case "fencedresources":
		return slices.Contains(fencedResources, name)
	case "pods":
		return slices.Contains(pods, name)
	}
	return false
}
