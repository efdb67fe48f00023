package admission_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// Attacks on ordinary objects (ConfigMaps, Deployments and their status) declared by a
// FencingPolicy, on the real apiserver with the operator's generated webhook configuration.

const appLease = "app-writer"

// grantObjects lets users write ConfigMaps and Deployments (status and scale included) in ns, so that
// the refusals below are fencekit's, not RBAC's.
func grantObjects(t *testing.T, ns string, users ...string) {
	env.Grant(t, ns, "objects-editor", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status", "deployments/scale"}, Verbs: []string{"*"}},
	}, users...)
}

// declarePolicy creates a FencingPolicy in ns fencing resources for lease appLease and waits until the
// webhook enforces it: Ready=True and a probe write without a token (a dry run) refused by fencekit.
func declarePolicy(t *testing.T, ns, name string, resources ...fencingv1alpha1.FencedObjects) *fencingv1alpha1.FencingPolicy {
	t.Helper()
	p := &fencingv1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: resources},
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("declaring FencingPolicy %s: %v", name, err)
	}
	enforced(t, ns, name, map[string]string{"app": "fenced"})
	return p
}

// configMapHolder is the holder of the objects tests: worker app-operator, allowed with users to write
// ConfigMaps and Deployments in ns (grantObjects), holding Lease appLease at epoch 1 under FencingPolicy app,
// which fences the ConfigMaps of ns. It returns the holder and its token.
func configMapHolder(t *testing.T, ns string, users ...string) (worker, elector.Token) {
	t.Helper()
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, append([]string{holder.User}, users...)...)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	return holder, holder.Acquire(t, ns, appLease, 1)
}

// enforced waits until the webhook enforces FencingPolicy ns/name (it refuses a tokenless dry-run create
// of a ConfigMap labelled probeLabels) and the operator has recorded the policy's coverage for its
// generation: a Lease acquired from then on has its writes decided on the webhook's copy.
func enforced(t *testing.T, ns, name string, probeLabels map[string]string) {
	t.Helper()
	testenv.Eventually(t, "the webhook refuses an unfenced write of a declared ConfigMap", func() (bool, string) {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: probeLabels}}
		err := env.Client.Create(t.Context(), probe, client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	testenv.Eventually(t, "the operator records FencingPolicy "+name+"'s coverage", func() (bool, string) {
		var p fencingv1alpha1.FencingPolicy
		if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			return false, err.Error()
		}
		return p.Status.CoverageGeneration == p.Generation,
			fmt.Sprintf("generation %d, coverage generation %d", p.Generation, p.Status.CoverageGeneration)
	})
}

func readyCondition(t *testing.T, key types.NamespacedName) (metav1.Condition, bool) {
	t.Helper()
	var p fencingv1alpha1.FencingPolicy
	if err := env.Client.Get(t.Context(), key, &p); err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(p.Status.Conditions, fencingv1alpha1.ConditionReady)
	if c == nil {
		return metav1.Condition{}, false
	}
	return *c, true
}

func tokenOf(t elector.Token) fencing.TokenFunc { return func() elector.Token { return t } }

func mustContain(t *testing.T, what string, err error, is func(error) bool, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted, want refused", what)
		return
	}
	t.Logf("%s: %v", what, err)
	if is != nil && !is(err) {
		t.Errorf("%s: refused with reason %q, want another: %v", what, fencing.ReasonOf(err), err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code >= 500 {
		t.Errorf("%s: a %d, not a refusal: %v", what, status.Status().Code, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q does not contain %q", what, err, p)
		}
	}
}

// TestFencingPolicyStaleHolder: replica-1 of one ServiceAccount held the Lease at epoch 1 and wrote a
// ConfigMap and a Deployment through fencing.NewClient; replica-2 took over at epoch 2 and wrote. Every
// late write of replica-1, whatever its shape, is refused, the refusal naming the object, the numbers and
// what to send; the live holder's data stays. A new acquisition refuses the old epoch at once (the webhook
// reads the Lease with a quorum read, no informer to lag).
func TestFencingPolicyStaleHolder(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	r1, r2 := replicas(t, ns)
	other := newWorker(t, ns, "intruder")
	grantObjects(t, ns, r1.User, other.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"})

	t1, c1 := holderClient(t, r1, ns, appLease, 1)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-config"}, Data: map[string]string{"v": "r1"}}
	testenv.Eventually(t, "replica-1 (RBAC granted) creates the ConfigMap at epoch 1", func() (bool, string) {
		err := c1.Create(ctx, cm.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), testenv.ErrString(err)
	})
	dep := testenv.Deployment(ns, "app")
	if err := c1.Create(ctx, dep); err != nil {
		t.Fatalf("replica-1 creating the Deployment at epoch 1: %v", err)
	}
	t2 := r2.Acquire(t, ns, appLease, 2)
	c2 := fencing.NewClient(r2.Client, tokenOf(t2))
	var live corev1.ConfigMap
	if err := c2.Get(ctx, client.ObjectKeyFromObject(cm), &live); err != nil {
		t.Fatal(err)
	}
	live.Data["v"] = "r2"
	if err := c2.Update(ctx, &live); err != nil {
		t.Fatalf("replica-2's update at epoch 2: %v", err)
	}
	if got := live.Annotations[fencingv1alpha1.ObjectEpochAnnotation]; got != "2" {
		t.Errorf("after replica-2's write the ConfigMap records epoch %q, want 2", got)
	}

	cmKey := client.ObjectKeyFromObject(cm)
	cmRef := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cm.Name}}
	}
	readCM := func() *corev1.ConfigMap { return readConfigMap(t, ns, cm.Name) }
	readDep := func() *appsv1.Deployment { return testenv.Read[appsv1.Deployment](t, env.Client, ns, dep.Name) }
	what := "ConfigMap " + ns + "/app-config"
	stale := []string{what + ": stale epoch 1: lease app-writer is at epoch 2, held by replica-2"}
	noToken := []string{what + ": this write changes data.v but presents no fencing token", "fieldManager=fencing.fencekit.io/epoch=<its epoch>"}
	attacks := []refusal{{
		name: "a plain merge patch",
		write: func() error {
			return r1.Client.Patch(ctx, cmRef(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"late"}}`)))
		},
		is: fencing.IsTokenMissing, msg: noToken,
	}, {
		name:  "a read-modify-write Update",
		write: func() error { c := readCM(); c.Data["v"] = "late"; return r1.Client.Update(ctx, c) },
		is:    fencing.IsTokenMissing, msg: noToken,
	}, {
		name: "a server-side apply without a token",
		write: func() error {
			return r1.Client.Apply(ctx, corev1ac.ConfigMap(cm.Name, ns).WithData(map[string]string{"v": "late"}),
				client.FieldOwner("app-operator"), client.ForceOwnership)
		},
		is: fencing.IsTokenMissing, msg: []string{`presents no fencing token (field manager "app-operator")`},
	}, {
		name: "a merge patch under the old token that also stamps the old epoch",
		write: func() error {
			return r1.Client.Patch(ctx, cmRef(), client.RawPatch(types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"fencing.fencekit.io/epoch":"1"}},"data":{"v":"late"}}`)), client.FieldOwner(t1.FieldManager()))
		},
		is: fencing.IsStale, msg: stale,
	}, {
		name:  "fencing.NewClient's Update with the old token",
		write: func() error { c := readCM(); c.Data["v"] = "late"; return c1.Update(ctx, c) },
		is:    fencing.IsStale, msg: stale,
	}, {
		name: "fencing.NewClient's merge patch with the old token",
		write: func() error {
			c := readCM()
			base := c.DeepCopy()
			c.Data["v"] = "late"
			return c1.Patch(ctx, c, client.MergeFrom(base))
		},
		is: fencing.IsStale, msg: stale,
	}, {
		name:  "fencing.NewClient's server-side apply with the old token",
		write: func() error { return c1.Apply(ctx, configMapApply(ns, cm.Name, "late")) },
		is:    fencing.IsStale, msg: stale,
	}, {
		name: "the Deployment's spec, with the old token",
		write: func() error {
			d := readDep()
			d.Spec.Replicas = ptr.To(int32(5))
			return c1.Update(ctx, d)
		},
		is: fencing.IsStale, msg: []string{"Deployment " + ns + "/app: stale epoch 1: lease app-writer is at epoch 2"},
	}, {
		name: "the Deployment's status subresource, patched with the old token",
		write: func() error {
			d := readDep()
			base := d.DeepCopy()
			d.Status.ObservedGeneration = 42
			return c1.Status().Patch(ctx, d, client.MergeFrom(base))
		},
		is: fencing.IsStale, msg: []string{"Deployment " + ns + "/app: stale epoch 1"},
	}, {
		name: "the Deployment's status subresource, updated without a token",
		write: func() error {
			d := readDep()
			d.Status.ObservedGeneration = 42
			return r1.Client.Status().Update(ctx, d)
		},
		is: fencing.IsTokenMissing, msg: []string{"Deployment " + ns + "/app: this write changes status.observedGeneration but presents no fencing token"},
	}, {
		name: "the Deployment's scale subresource with the old token",
		write: func() error {
			return c1.SubResource("scale").Patch(ctx, readDep(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":7}}`)))
		},
		is: fencing.IsStale, msg: []string{"stale epoch 1"},
	}, {
		name:  "a plain delete",
		write: func() error { return r1.Client.Delete(ctx, cmRef()) },
		is:    fencing.IsTokenMissing, msg: []string{what + " is fenced by lease app-writer, held by replica-2 at epoch 2: a DELETE carries no fencing token"},
	}, {
		name:  "fencing.NewClient's delete with the old token (its marker write)",
		write: func() error { return c1.Delete(ctx, cmRef()) },
		is:    fencing.IsStale, msg: stale,
	}, {
		name: "another elector user presenting the current token",
		write: func() error {
			c := readCM()
			c.Data["v"] = "copied"
			return fencing.NewClient(other.Client, tokenOf(t2)).Update(ctx, c)
		},
		is: fencing.IsNotHolder, msg: []string{what + `: user "intruder-user" is not the user that acquired lease app-writer at epoch 2`},
	}, {
		name:  "another elector user deleting",
		write: func() error { return other.Client.Delete(ctx, cmRef()) },
		is:    fencing.IsNotHolder, msg: []string{"only that holder's user \"orders-sa-user\""},
	}}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) { mustContain(t, a.name, a.write(), a.is, a.msg...) })
	}
	if got := readCM().Data["v"]; got != "r2" {
		t.Errorf("the ConfigMap holds %q after the attacks, want replica-2's %q", got, "r2")
	}
	if got := readDep().Spec.Replicas; *got != 1 {
		t.Errorf("the Deployment has %d replicas after the attacks, want 1", *got)
	}

	// The current token with the epoch record left out (inherited from storage at the previous epoch) is
	// refused: a fenced write of the object sets the record to the epoch it presents.
	t3 := r1.Acquire(t, ns, appLease, 3)
	c3 := fencing.NewClient(r1.Client, tokenOf(t3))
	mustContain(t, "the current token, the record left at the previous epoch",
		r1.Client.Patch(ctx, cmRef(), client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"unstamped"}}`)), client.FieldOwner(t3.FieldManager())),
		func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonInvalid }, `would carry fencing.fencekit.io/epoch="2"`)
	// A new acquisition refuses the previous epoch at once: no poll between the acquisition and the write.
	mustContain(t, "replica-2's write right after replica-1 acquired epoch 3", func() error {
		c := readCM()
		c.Data["v"] = "r2-late"
		return c2.Update(ctx, c)
	}(), fencing.IsStale, what+": stale epoch 2: lease app-writer is at epoch 3, held by replica-1")
	// The live holder's fenced client writes, patches, applies, writes status and deletes.
	c := readCM()
	base := c.DeepCopy()
	c.Data["v"] = "r1-epoch3"
	if err := c3.Patch(ctx, c, client.MergeFrom(base)); err != nil {
		t.Fatalf("the holder's merge patch at epoch 3: %v", err)
	}
	if err := c3.Apply(ctx, configMapApply(ns, cm.Name, "r1-applied")); err != nil {
		t.Fatalf("the holder's apply at epoch 3: %v", err)
	}
	d := readDep()
	dbase := d.DeepCopy()
	d.Status.ObservedGeneration = 3
	if err := c3.Status().Patch(ctx, d, client.MergeFrom(dbase)); err != nil {
		t.Fatalf("the holder's status patch at epoch 3: %v", err)
	}
	if err := c3.Delete(ctx, cmRef()); err != nil {
		t.Fatalf("the holder's delete at epoch 3: %v", err)
	}
	if err := env.Client.Get(ctx, cmKey, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ConfigMap still exists after the holder's delete: %v", err)
	}
	// No token at all: the client refuses without sending.
	if err := fencing.NewClient(r1.Client, tokenOf(elector.Token{})).Create(ctx, cm.DeepCopy()); !fencing.IsNoToken(err) {
		t.Errorf("a create without a token: %v, want fencing.ErrNoToken", err)
	}
	if err := env.Client.Get(ctx, cmKey, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("a create without a token reached the apiserver: %v", err)
	}
}

// TestFencingPolicyEditorWrites: a user with RBAC on ConfigMaps only (an editor, a GitOps tool, kubectl)
// changes a covered ConfigMap's data in every shape a client can send: JSON patch, strategic merge patch,
// server-side apply with force, a dry run, a field manager that looks like a token, a create with
// generateName. Each is refused, naming the object, and the holder's data stays.
func TestFencingPolicyEditorWrites(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Data: map[string]string{"v": "holder"}}); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
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
		err := retryRBAC(t, name, write)
		if name == "a field manager that looks like a token" {
			mustContain(t, name, err, func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonInvalid }, "ConfigMap "+ns+"/app", `"fencing.fencekit.io/epoch=01" is not a valid fencing token`)
			continue
		}
		mustContain(t, name, err, fencing.IsTokenMissing, "ConfigMap "+ns+"/app", "data.v")
	}
	gen := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "gen-"}, Data: map[string]string{"v": "editor"}}
	mustContain(t, "a create with generateName", editor.Create(ctx, gen), fencing.IsTokenMissing, "ConfigMap "+ns+"/gen-", "data.v")
	if got := readConfigMap(t, ns, "app").Data["v"]; got != "holder" {
		t.Errorf("the ConfigMap holds %q, want the holder's", got)
	}
}

// TestFencingPolicyValidation: what fencekit must never fence, unknown and cluster-scoped resources, and
// a policy overlapping another one bound to a different Lease are refused at creation, each naming the
// problem; the status says whether the policy is enforced, with a real reason.
func TestFencingPolicyValidation(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	policy := func(name, lease string, entries ...fencingv1alpha1.FencedObjects) *fencingv1alpha1.FencingPolicy {
		return &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: entries}}
	}
	sel := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"tier": v}}
	}
	first := policy("first", "lease-a", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: sel("a")})
	if err := env.Client.Create(ctx, first); err != nil {
		t.Fatalf("creating a valid policy: %v", err)
	}
	kubeSystem := policy("ks", "lease-a", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	kubeSystem.Namespace = "kube-system"
	refused := []struct {
		name string
		p    *fencingv1alpha1.FencingPolicy
		msg  string
	}{
		{"Leases", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "coordination.k8s.io", Resource: "leases"}), "leases cannot be fenced by a FencingPolicy"},
		{"Events", policy("p", "l", fencingv1alpha1.FencedObjects{Resource: "events"}), "events cannot be fenced"},
		{"events.k8s.io Events", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "events.k8s.io", Resource: "events"}), "events cannot be fenced"},
		{"fencekit's own kinds", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "fencing.fencekit.io", Resource: "fencedresources"}), "fencekit's own kinds"},
		{"TokenReviews", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "authentication.k8s.io", Resource: "tokenreviews"}), "group authentication.k8s.io cannot be fenced"},
		{"SubjectAccessReviews", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "authorization.k8s.io", Resource: "localsubjectaccessreviews"}), "group authorization.k8s.io cannot be fenced"},
		{"ServiceAccounts", policy("p", "l", fencingv1alpha1.FencedObjects{Resource: "serviceaccounts"}), "core resource serviceaccounts cannot be fenced"},
		{"a wildcard", policy("p", "l", fencingv1alpha1.FencedObjects{Resource: "*"}), "spec.resources[0].resource"},
		{"a Kind for a resource", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "Deployment"}),
			`spec.resources[0].resource: Invalid value: "Deployment": resource must be the plural, lower-case resource name, as in RBAC rules ("deployments", not "Deployment")`},
		{"twice the same resource", policy("p", "l", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "configmaps"}), "each group and resource may appear only once"},
		{"an unknown resource", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "example.com", Resource: "widgets"}), "widgets.example.com (the apiserver serves no such resource)"},
		{"a cluster-scoped resource", policy("p", "l", fencingv1alpha1.FencedObjects{Group: "networking.k8s.io", Resource: "ingressclasses"}), "ingressclasses.networking.k8s.io\": it is cluster-scoped"},
		{"kube-system", kubeSystem, "objects in kube-system cannot be fenced"},
		{"an overlap with a policy of another Lease", policy("second", "lease-b", fencingv1alpha1.FencedObjects{Resource: "configmaps"}),
			"configmaps overlaps FencingPolicy " + ns + "/first, which fences it for lease lease-a (this policy names lease lease-b)"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(ctx, tc.p, client.DryRunAll)
			mustContain(t, tc.name, err, nil, tc.msg)
		})
	}
	for name, p := range map[string]*fencingv1alpha1.FencingPolicy{
		"disjoint selectors, another Lease": policy("disjoint", "lease-b", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: sel("b")}),
		"the same Lease":                    policy("same", "lease-a", fencingv1alpha1.FencedObjects{Resource: "configmaps"}),
	} {
		if err := env.Client.Create(ctx, p, client.DryRunAll); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}

	key := client.ObjectKeyFromObject(first)
	testenv.Eventually(t, "Ready=False LeaseNotFound before the Lease exists", func() (bool, string) {
		c, ok := readyCondition(t, key)
		return ok && c.Status == metav1.ConditionFalse && c.Reason == fencingv1alpha1.ReasonPolicyLeaseNotFound &&
			strings.Contains(c.Message, "lease lease-a does not exist"), c.Reason + ": " + c.Message
	})
	newWorker(t, ns, "a").Acquire(t, ns, "lease-a", 4)
	testenv.Eventually(t, "Ready=True Enforced once the Lease exists", func() (bool, string) {
		c, ok := readyCondition(t, key)
		return ok && c.Status == metav1.ConditionTrue && c.Reason == fencingv1alpha1.ReasonEnforced &&
			strings.Contains(c.Message, "only the holder of lease lease-a may write configmaps (tier=a)"), c.Reason + ": " + c.Message
	})

	// A policy that names Leases under another spelling ("" group, or the singular) would resolve through
	// the RESTMapper; fence-on-acquire would then list the Leases and "raise" their epoch annotation, which
	// is the Lease's own epoch, and every acquisition would fail. The policy webhook takes a resource only
	// as the apiserver serves it: exact group, plural name.
	t.Run("a policy that covers Leases under another spelling", func(t *testing.T) {
		for _, res := range []fencingv1alpha1.FencedObjects{{Group: "", Resource: "leases"}, {Group: "coordination.k8s.io", Resource: "lease"}} {
			ns := env.Namespace(t)
			holder := fencingHolder(t, ns, protocol.Fences{Objects: true})
			env.Grant(t, ns, "lease-patcher", []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"patch"}}}, holder.User)
			holder.Acquire(t, ns, "l", 1)
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leases"},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{res}}}
			if err := env.Client.Create(ctx, p); err != nil {
				continue // refused: safe
			}
			tok := holder.Acquire(t, ns, "l", 2)
			err := retryRBAC(t, "fence-on-acquire", func() error { return fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, tok) })
			if err != nil {
				t.Errorf("policy %+v admitted, and fence-on-acquire at epoch 2 fails: %v", res, err)
			}
		}
	})

	// A policy naming a resource in a spelling the webhook rule never matches (singular, or the core group
	// for an apps resource) would fence nothing: it is refused.
	t.Run("a policy names a resource the webhook rule never matches", func(t *testing.T) {
		ns := env.Namespace(t)
		for i, res := range []fencingv1alpha1.FencedObjects{{Resource: "configmap"}, {Group: "", Resource: "deployments"}} {
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%d", i)},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{res}}}
			if err := env.Client.Create(ctx, p); err == nil {
				t.Errorf("FencingPolicy naming %q in group %q admitted: its webhook rule matches no request", res.Resource, res.Group)
			}
		}
	})

	// A user with RBAC on FencingPolicies only declares a policy that covers Leases. Were it
	// admitted, every Lease write would go through the object webhook too, and the epoch record of the
	// policy's objects is the Lease's own epoch annotation: the next acquisition would present epoch 2 while
	// the Lease is at 1 ("never issued"), and nobody could acquire the Lease again. The policy is refused.
	t.Run("a policy that covers Leases", func(t *testing.T) {
		ns := env.Namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Acquire(t, ns, "l", 1)
		env.Grant(t, ns, "policy-writer", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencingpolicies"},
			Verbs: []string{"*"}}}, "gitops")
		gitops := env.ClientAs(t, "gitops")
		p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leases"},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{{Group: "coordination.k8s.io", Resource: "leases"}}}}
		err := retryRBAC(t, "the policy write", func() error { return gitops.Create(ctx, p) })
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
}

// configMapApply is a server-side apply configuration of a ConfigMap holding v.
func configMapApply(ns, name, v string) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(name, ns).WithData(map[string]string{"v": v})
}

// TestFencingPolicyDeletion: the generated webhook configuration follows the policies: once the only policy
// of a namespace is deleted, its webhook is removed and writes there are free again; the other namespace's
// webhook stays.
func TestFencingPolicyDeletion(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns, kept := env.Namespace(t), env.Namespace(t)
	p := declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	declarePolicy(t, kept, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	if err := env.Client.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "an unfenced write is admitted once the policy is gone", func() (bool, string) {
		err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "free"}}, client.DryRunAll)
		return err == nil, testenv.ErrString(err)
	})
	err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: kept, Name: "free"}}, client.DryRunAll)
	mustContain(t, "an unfenced write in the namespace whose policy stays", err, fencing.IsTokenMissing, "ConfigMap "+kept+"/free")
}

// TestFenceObjectsOnAcquire: the hook raises the epoch record of every object the Lease's policies declare
// (and no other) with the new token before leadership is reported, so that an earlier holder's write is
// refused by the per-object rule too, even if the new holder never writes.
func TestFenceObjectsOnAcquire(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	r1, r2 := replicas(t, ns)
	grantObjects(t, ns, r1.User)
	grantPolicies(t, ns, r1.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps",
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	_, c1 := holderClient(t, r1, ns, appLease, 1)
	fenced := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fenced", Labels: map[string]string{"app": "fenced"}}}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}}
	testenv.Eventually(t, "replica-1 (RBAC granted) creates both ConfigMaps at epoch 1", func() (bool, string) {
		err := c1.Create(ctx, fenced.DeepCopy())
		if err == nil || apierrors.IsAlreadyExists(err) {
			err = c1.Create(ctx, other.DeepCopy())
		}
		return err == nil || apierrors.IsAlreadyExists(err), testenv.ErrString(err)
	})
	t2 := r2.Acquire(t, ns, appLease, 2)
	if err := fencing.FenceObjectsOnAcquire(r2.Client, r2.Client).Raise(ctx, t2); err != nil {
		t.Fatalf("replica-2's fence-on-acquire at epoch 2: %v", err)
	}
	if got := objectEpoch(t, ns, fenced.Name); got != "2" {
		t.Errorf("the declared ConfigMap records epoch %q after fence-on-acquire, want 2", got)
	}
	if got := objectEpoch(t, ns, other.Name); got != "1" {
		t.Errorf("the undeclared ConfigMap records epoch %q, want it left at 1", got)
	}
	if err := fencing.FenceObjectsOnAcquire(r2.Client, r2.Client).Raise(ctx, t2); err != nil {
		t.Errorf("a second run at the same epoch: %v, want nothing to do", err)
	}
	mustContain(t, "replica-1's write at epoch 1 after the fence", c1.Patch(ctx, fenced.DeepCopy(),
		client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"late"}}`))), fencing.IsStale, "stale epoch 1")
}

// acquireErr is Worker.Acquire returning the error instead of failing the test.
func acquireErr(t *testing.T, w worker, ns, name string, epoch int64) error {
	t.Helper()
	var lease coordinationv1.Lease
	if err := w.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &lease); err != nil {
		return err
	}
	testenv.AcquiredBy(&lease, w.User, w.Holder, epoch, 15*time.Second)
	if f := w.Fences.String(); f != "" {
		lease.Annotations[protocol.FencesAnnotation] = f
	}
	return w.Client.Update(t.Context(), &lease, testenv.Presenting(epoch))
}

// fencingHolder is worker app-operator of ns, whose elector declares and runs fences on acquire, allowed to
// list the FencingPolicies of ns (fence-on-acquire reads them).
func fencingHolder(t *testing.T, ns string, fences protocol.Fences) worker {
	t.Helper()
	holder := newWorker(t, ns, "app-operator")
	holder.Fences = fences
	grantPolicies(t, ns, holder.User)
	return holder
}

// grantPolicies lets users list FencingPolicies in ns (fence-on-acquire reads them).
func grantPolicies(t *testing.T, ns string, users ...string) {
	env.Grant(t, ns, "policy-reader", []rbacv1.PolicyRule{
		{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencingpolicies"}, Verbs: []string{"get", "list", "watch"}}}, users...)
}
