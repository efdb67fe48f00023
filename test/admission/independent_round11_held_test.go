//go:build openholes

package admission_test

// Round 11's attempts that held (independent_round11_test.go has the others) and take most of a minute
// each: outside make test, run with -tags openholes. Each asserts the invariant it tries to break.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound11ForeignPoliciesSlowTheAcquisition: persona: a namespace admin or GitOps tool with RBAC on
// FencingPolicies (not the holder, no token). Route: creates of FencingPolicies bound to other Leases
// (disjoint selectors over Secrets, so the policy webhook admits them), each padded with a 200 KB
// annotation. Fence-on-acquire lists every FencingPolicy of the namespace from the apiserver and keeps
// those of its Lease; the object webhook lists them from the apiserver too whenever its cache shows none
// covering a write. Invariant I3 (the work and time of an acquisition do not grow with what non-holders
// create): fence-on-acquire over the holder's five ConfigMaps must take no more than twice the time
// without the foreign policies plus one second.
func TestRound11ForeignPoliciesSlowTheAcquisition(t *testing.T) {
	operatortest.Start(t, env)
	base, baseFree, err := round11FenceTime(t, nil)
	t.Logf("control: fence %v (err %v); 10 uncovered ConfigMap creates %v", base.Round(time.Millisecond), err, baseFree.Round(time.Millisecond))
	const n, size = 120, 200 * 1000
	created := 0
	var firstErr error
	padded, paddedFree, err := round11FenceTime(t, func(ns string) {
		gitops := env.ClientAs(t, "gitops")
		for i := range n {
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pad-%03d", i),
				Annotations: map[string]string{"example.com/pad": strings.Repeat("x", size)}},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: fmt.Sprintf("other-%d", i), Resources: []fencingv1alpha1.FencedObjects{{Resource: "secrets",
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pad": fmt.Sprint(i)}}}}}}
			err := retryRBAC(t, "the GitOps tool's policy", func() error { return gitops.Create(t.Context(), p) })
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			created++
		}
		t.Logf("the GitOps tool created %d of %d foreign policies of %d bytes each (first refusal: %v)", created, n, size, round9Short(firstErr))
	})
	t.Logf("padded: fence %v (err %v); 10 uncovered ConfigMap creates %v", padded.Round(time.Millisecond), err, paddedFree.Round(time.Millisecond))
	if created > 0 && (err != nil || padded > 2*base+time.Second) {
		t.Errorf("%d foreign FencingPolicies of %d bytes took fence-on-acquire from %v to %v (err %v) (I3)", created, size, base, padded, err)
	}
}

// TestRound11ForeignPoliciesStormFailsTheHoldersWrites: persona: a namespace admin or GitOps tool with
// RBAC on FencingPolicies and ConfigMaps (no token). Route: 120 FencingPolicies of other Leases (Secrets,
// disjoint selectors) padded with 200 KB annotations each, then a storm of creates of ConfigMaps that no
// policy covers (admitted: nothing fences them), from four goroutines. The object webhook is called for
// every ConfigMap of the namespace, and when its cache shows no policy covering a write it lists the
// namespace's policies from the apiserver (24 MB here) before it admits it. Invariant I2 (nothing admitted
// without the token can make the holder's next write fail): ten fenced writes of the holder's covered
// ConfigMap during the storm, each within fencing.DefaultWriteTimeout, must all succeed.
func TestRound11ForeignPoliciesStormFailsTheHoldersWrites(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User, "gitops")
	env.Grant(t, ns, "gitops-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"*"}}}, "gitops")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	fc := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(tok))
	if err := retryRBAC(t, "the holder's ConfigMap", func() error {
		return fc.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine", Labels: map[string]string{"app": "fenced"}},
			Data: map[string]string{"n": "0"}})
	}); err != nil {
		t.Fatal(err)
	}
	gitops := round11Unthrottled(t, "gitops")
	const n, size = 120, 200 * 1000
	for i := range n {
		p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pad-%03d", i),
			Annotations: map[string]string{"example.com/pad": strings.Repeat("x", size)}},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: fmt.Sprintf("other-%d", i), Resources: []fencingv1alpha1.FencedObjects{{Resource: "secrets",
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"pad": fmt.Sprint(i)}}}}}}
		if err := retryRBAC(t, "the GitOps tool's policy", func() error { return gitops.Create(ctx, p) }); err != nil {
			t.Fatalf("policy %d: %v", i, round9Short(err))
		}
	}
	admitted, firstErr, stop := round11Storm(t, 4, func(ctx context.Context, _, _ int) error {
		return gitops.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "free-"}})
	})
	testenv.Eventually(t, "the storm", func() (bool, string) { return admitted.Load() > 4, fmt.Sprint(admitted.Load(), firstErr()) })
	failed := 0
	var first string
	var slowest time.Duration
	start := time.Now()
	for i := 1; i <= 10; i++ {
		wctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		s := time.Now()
		err := fc.Patch(wctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mine"}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"n":"%d"}}`, i)))
		cancel()
		slowest = max(slowest, time.Since(s))
		if err != nil {
			failed++
			if first == "" {
				first = round9Short(err)
			}
		}
	}
	took := time.Since(start)
	stop()
	t.Logf("storm: %d uncovered ConfigMaps created (first refusal %q); the holder's 10 fenced writes: %d failed, %v in all, slowest %v",
		admitted.Load(), firstErr(), failed, took.Round(time.Millisecond), slowest.Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("a storm of admitted uncovered creates in a namespace padded with foreign policies failed %d of the holder's 10 fenced writes (I2): %s", failed, first)
	}
}
