package admission_test

// Round 6 of the independent attacker: the attacks on the rule after round 5 that the code withstood.
// Each test asserts the invariant it tried to break (it fails when the attack works). The attacks that
// worked are in round6_closed_test.go and round6_late_closed_test.go.

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round6Declarer is a client of user declarer (create RBAC on fencedresources only, in ns), without
// client-side rate limiting.
func round6Declarer(t *testing.T, ns string) client.Client {
	t.Helper()
	env.Grant(t, ns, "declarer", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources"}, Verbs: []string{"create"}}}, "declarer")
	declarer := unthrottled(t, "declarer")
	if err := retryRBAC(t, "the first declaration", func() error {
		return declarer.Create(t.Context(), &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "probe"}})
	}); err != nil {
		t.Fatal(err)
	}
	return declarer
}

// round6Declare has declarer declare n FencedResources named prefix-NNNNN bound to lease in ns, 8 at a
// time, each carrying annotations ann.
func round6Declare(t *testing.T, declarer client.Client, ns, lease, prefix string, n int, ann ...map[string]string) {
	t.Helper()
	var annotations map[string]string
	if len(ann) > 0 {
		annotations = ann[0]
	}
	var failed atomic.Int64
	workqueue.ParallelizeUntil(t.Context(), 8, n, func(i int) {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%05d", prefix, i), Annotations: annotations},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: lease}}
		if err := declarer.Create(t.Context(), fr); err != nil && failed.Add(1) == 1 {
			t.Errorf("declaring %s: %v", fr.Name, err)
		}
	})
	if failed.Load() > 0 {
		t.Fatalf("%d declarations failed", failed.Load())
	}
}

// TestRound6EmptySelectorIsContent: attack on I1 (content), by a user with RBAC on the objects only.
// changedPaths counts an absent field, null, an empty map and an empty list as the same value, so a write
// without the token that turns a map-valued field from {} into nothing (or back) changes no path the rule
// sees. For a PodDisruptionBudget (policy/v1) that is the difference between selecting every Pod of the
// namespace (selector {}) and selecting none (selector null). The holder writes two PDBs, one protecting
// every Pod (selector {}) and one protecting none; the user removes the first's selector and sets the
// second's to {} with merge patches without the token. Both must be refused and both selectors stay as
// the holder wrote them.
func TestRound6EmptySelectorIsContent(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pdbs", []rbacv1.PolicyRule{{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"*"}}},
		holder.User, "editor")
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
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	all := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "all"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)), Selector: &metav1.LabelSelector{}}}
	none := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "none"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0))}}
	for _, pdb := range []*policyv1.PodDisruptionBudget{all, none} {
		if err := retryRBAC(t, "the holder's PDB", func() error { return fenced.Create(ctx, pdb) }); err != nil {
			t.Fatal(err)
		}
	}
	selector := func(name string) string {
		got := testenv.Read[policyv1.PodDisruptionBudget](t, env.Client, ns, name)
		if got.Spec.Selector == nil {
			return "null (no Pod)"
		}
		return fmt.Sprintf("%v (every Pod when empty)", got.Spec.Selector)
	}
	t.Logf("as the holder wrote them: all %s, none %s", selector("all"), selector("none"))
	editor := env.ClientAs(t, "editor")
	for _, c := range []struct{ name, patch, want string }{
		{"all", `{"spec":{"selector":null}}`, selector("all")},
		{"none", `{"spec":{"selector":{}}}`, selector("none")},
	} {
		err := retryRBAC(t, "the editor's patch", func() error {
			return editor.Patch(ctx, &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}},
				client.RawPatch(types.MergePatchType, []byte(c.patch)))
		})
		got := selector(c.name)
		t.Logf("editor without the token patches PDB %s with %s: %v; selector now %s", c.name, c.patch, err, got)
		if err == nil || got != c.want {
			t.Errorf("PDB %s: a merge patch %s without the token was admitted (%v) and its selector is now %s, was %s (I1 content)", c.name, c.patch, err, got, c.want)
		}
	}
}

// TestRound6SelfLinkIsNotPadding: attack on I3 (and I2), by a user with RBAC on the objects only. The
// allowlist frees metadata.selfLink as "apiserver-kept metadata", and the part bound (64 KiB) counts only
// labels, annotations, finalizers, owner references, status and others' managedFields. If the apiserver
// stores a selfLink a client sends, a write without the token can pad the holder's object far past the
// part bound (up to the 512 KiB bound on the whole object), which every acquisition's raise then rewrites.
// The editor sends a 300 KB selfLink to a ConfigMap the holder wrote, then 64 KiB (within the part bound).
// Neither may leave more than the part bound stored outside the holder's content.
func TestRound6SelfLinkIsNotPadding(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	fenced, editor := round5ObjectHolder(t, ns)
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{300 * 1024, 60 * 1024} {
		link := "/api/v1/namespaces/" + ns + "/configmaps/cm?" + strings.Repeat("x", n)
		err := patchConfigMap(t, editor, ns, "cm", string(mustJSON(t, map[string]any{"metadata": map[string]any{"selfLink": link}})))
		stored := len(readConfigMap(t, ns, "cm").GetSelfLink())
		t.Logf("editor without the token sets a selfLink of %d bytes: %v; stored selfLink %d bytes", len(link), err, stored)
		if stored > admission.MaxFreePartBytes {
			t.Errorf("a write without the token stored a selfLink of %d bytes on the holder's ConfigMap, past the part bound of %d (I3)", stored, admission.MaxFreePartBytes)
		}
	}
	// The same on a FencedResource the holder wrote (a custom resource: stored as JSON).
	holder := newWorker(t, ns, "fr-holder")
	grantFencedResources(t, ns, holder.User, "editor")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "fr", "l")
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	link := "/apis/x?" + strings.Repeat("x", 300*1024)
	err := retryRBAC(t, "the editor's patch", func() error {
		return mergePatch(t, editor, key, string(mustJSON(t, map[string]any{"metadata": map[string]any{"selfLink": link}})))
	})
	stored := len(get(t, key).GetSelfLink())
	t.Logf("editor without the token sets a selfLink of %d bytes on FencedResource %s: %v; stored selfLink %d bytes", len(link), key, err, stored)
	if stored > admission.MaxFreePartBytes {
		t.Errorf("a write without the token stored a selfLink of %d bytes on the holder's FencedResource (I3)", stored)
	}
}

// TestRound6WrittenListScansDeclarations: attack on I3 (acquisition), by a user with create RBAC on
// FencedResources only. FenceOnAcquire lists the resources a holder wrote (spec.epoch!=0) without a
// budget, by field selector; the apiserver evaluates a custom resource's selectable fields by scanning
// every FencedResource of the namespace, declarations included. The holder writes 5 resources; the test
// times that List (the median of 5) before and after a non-holder declares 8,000 more. The List's time, an
// unbudgeted part of every acquisition, must not grow with the declarations (within 250 ms).
func TestRound6WrittenListScansDeclarations(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease, n = "busy", 8000
	holder := newWorker(t, ns, "app-operator")
	tok := holder.Acquire(t, ns, lease, 1)
	grantFencedResources(t, ns, holder.User)
	for i := range 5 {
		key := declare(t, ns, fmt.Sprintf("mine-%d", i), lease)
		if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
			return fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"v": i})
		}); err != nil {
			t.Fatal(err)
		}
	}
	reader := unthrottled(t, holder.User)
	timeList := func() (time.Duration, int) {
		var times []time.Duration
		got := 0
		for range 5 {
			var list fencingv1alpha1.FencedResourceList
			start := time.Now()
			sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.leaseName", lease), fields.OneTermNotEqualSelector("spec.epoch", "0"))
			if err := reader.List(ctx, &list, client.InNamespace(ns), client.MatchingFieldsSelector{Selector: sel}); err != nil {
				t.Fatal(err)
			}
			times = append(times, time.Since(start))
			got = len(list.Items)
		}
		slices.Sort(times)
		return times[len(times)/2], got
	}
	before, got := timeList()
	t.Logf("the written List with no declarations: %s (%d items)", before, got)
	start := time.Now()
	round6Declare(t, round6Declarer(t, ns), ns, lease, "d", n)
	t.Logf("%d declarations took %s to create", n, time.Since(start).Round(time.Second))
	after, got := timeList()
	t.Logf("the written List with %d declarations: %s (%d items)", n, after, got)
	if after > before+250*time.Millisecond {
		t.Errorf("the unbudgeted List of holder-written FencedResources took %s with %d non-holder declarations, %s without (I3)", after, n, before)
	}
}

// TestRound6StaleMarkerOnAnObject: the object counterpart of TestRound6StaleMarkerDisarmsTheHold, by a
// stale holder and a user with RBAC on the objects only. The holder wrote its deletion marker on a
// ConfigMap at epoch 1 (NewClient.Delete's first step) and paused; the Lease is acquired at epoch 2 and
// FenceObjectsOnAcquire raises the ConfigMap; the new holder arms its hold. A finalizer added without the
// token must then be refused (I2).
func TestRound6StaleMarkerOnAnObject(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok1 := configMapHolder(t, ns, "editor")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok1))
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	if err := patchConfigMap(t, fenced, ns, "cm", `{"metadata":{"annotations":{"fencing.fencekit.io/delete-at-epoch":"1"}}}`); err != nil {
		t.Fatalf("the holder's marker at epoch 1: %v", err)
	}
	holder.LeaseDuration = 10 * time.Minute
	tok2 := holder.Acquire(t, ns, appLease, 2)
	fence, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Raise(ctx, tok2); err != nil {
		t.Fatalf("fence-on-acquire at epoch 2: %v", err)
	}
	if err := patchConfigMap(t, fencing.NewClient(holder.Client, tokenOf(tok2)), ns, "cm", `{"metadata":{"annotations":{"fencing.fencekit.io/hold-at-epoch":"2"}}}`); err != nil {
		t.Fatalf("the holder arms its hold at epoch 2: %v", err)
	}
	t.Logf("the ConfigMap after the raise and the hold: annotations %v", readConfigMap(t, ns, "cm").Annotations)
	err = patchConfigMap(t, env.ClientAs(t, "editor"), ns, "cm", `{"metadata":{"finalizers":["example.com/x"]}}`)
	t.Logf("a finalizer without the token while the hold is armed: %v", err)
	if err == nil {
		_ = patchConfigMap(t, env.Client, ns, "cm", `{"metadata":{"finalizers":null}}`)
		t.Errorf("a finalizer without the token was admitted while the holder's hold at the current epoch was armed (I2)")
	}
}
