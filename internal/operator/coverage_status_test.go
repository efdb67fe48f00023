package operator_test

import (
	"net/http"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/internal/operator/webhook"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// The coverage epoch against a writer of the policy's status, and its residual: the webhook's caches of
// the policies and of the Lease lagging together.

// wrapWatches stalls only the watches of a client (requests with watch=true): its caches lag as long as
// the test wants, its reads go to the apiserver.
func (s *stall) wrapWatches(rt http.RoundTripper) http.RoundTripper {
	stalled := s.wrap(rt)
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if req.URL.Query().Get("watch") == "true" {
			return stalled.RoundTrip(req)
		}
		return rt.RoundTrip(req)
	})
}

// startLaggingOperator runs the operator with every watch of its manager stallable: the webhooks' copy of
// the Leases and their cache of the FencingPolicies (and the controllers' caches) lag together, as they do
// when the webhook's replica is cut off from the apiserver's watch or watches a lagging apiserver.
func startLaggingOperator(t *testing.T) copyAttack {
	t.Helper()
	s := newStall()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(s.wrapWatches)
	leases := webhook.NewLeaseCache(kubernetes.NewForConfigOrDie(cfg))
	w := env.Environment.WebhookInstallOptions
	stop, err := operator.Start(t.Context(), cfg, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: w.LocalServingHost, WebhookPort: w.LocalServingPort, WebhookCertDir: w.LocalServingCertDir,
		WebhookConfigName: "validating-webhook-configuration", SkipNameValidation: true, LeaseCache: leases,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.set(false)
		if err := stop(); err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	return copyAttack{s: s, leases: leases}
}

// TestCoveragePoliciesLagResidual (RESIDUAL, docs/design/residuals.md "Changes the copy has not seen"):
// the webhook reads the covering policy, and its recorded coverage, from its cache. When that cache lags
// as the copy of the Lease does, it can show an earlier object or generation of the policy that covered the
// object all along (coverage recorded, epoch 0) while the policy in the apiserver stopped covering it
// during a takeover (deleted, or narrowed: the new holder's fence did not list the object, which still
// records the stale epoch) and covers it again. The stale holder's write is admitted on the copy; the
// quorum read (the Lease is at 2) refuses it, and so does the webhook once either cache is current. The
// test asserts the residual as it stands and fails, naming itself, once the write is refused.
func TestCoveragePoliciesLagResidual(t *testing.T) {
	a := startLaggingOperator(t)
	ctx := t.Context()
	fenced := map[string]string{"app": "fenced"}
	setSelector := func(t *testing.T, ns string, selector *metav1.LabelSelector) {
		t.Helper()
		setPolicySelector(t, &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}, selector)
	}

	for _, c := range []struct {
		name string
		// uncover stops the policy covering ConfigMap cm before replica-2's acquisition, cover covers it
		// again after.
		uncover, cover func(t *testing.T, ns string)
	}{
		{
			name: "deleted and recreated",
			uncover: func(t *testing.T, ns string) {
				deleteAndWait(t, &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
			},
			cover: func(t *testing.T, ns string) {
				p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
					Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l", Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps"}}}}
				if err := env.Client.Create(ctx, p); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name:    "narrowed and widened",
			uncover: func(t *testing.T, ns string) { setSelector(t, ns, &metav1.LabelSelector{MatchLabels: fenced}) },
			cover:   func(t *testing.T, ns string) { setSelector(t, ns, nil) },
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns, _, r2, c1 := a.staleHolder(t, nil, "cm", nil)
			onCopy(t, "objects", "replica-1's write at epoch 1", func() error { return patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"one"}}`) })

			a.s.set(true) // the webhook's watches (Leases and policies) lag from here
			c.uncover(t, ns)
			acquireAndFence(t, r2, ns, "l", 2)
			if got := objectEpoch(t, ns, "cm"); got != "1" {
				t.Fatalf("cm records epoch %q after replica-2's fence, want 1 (not listed: no policy covered it)", got)
			}
			c.cover(t, ns)
			admittedOnCopy(t, "objects", "replica-1's write at epoch 1 to cm, covered again, the webhook's watches lagging",
				func() error { return patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"late"}}`) })
			a.s.set(false)
			a.seen(t, ns, "l", 2, r2.Holder)
			mustContain(t, "replica-1's write once the webhook's watches caught up", patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"later"}}`),
				fencing.IsStale, "stale epoch 1")
		})
	}
}

// TestCoverageIsTheOperators: the webhook trusts status.coverageEpoch, which RBAC lets anyone with
// fencingpolicies/status (or a wildcard on the group's resources) write, and the operator recomputes it
// only when the generation changes. After a policy is widened during replica-2's term (coverage epoch 2),
// such a user tries to set coverageEpoch to 0, so that replica-1's write at its stale epoch 1 to an object
// only the widened policy covers (never raised: it records 1) would be admitted on the stalled copy. The
// policy webhook refuses a change of the coverage fields by anyone but the operator; the stale write stays
// refused.
func TestCoverageIsTheOperators(t *testing.T) {
	a := startCopyAttack(t)
	ctx := t.Context()
	fenced := map[string]string{"app": "fenced"}
	ns, _, r2, c1 := a.staleHolder(t, fenced, "out", nil)

	a.s.set(true)
	acquireAndFence(t, r2, ns, "l", 2)
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	setPolicySelector(t, p, nil)
	covers(t, ns, "out")
	coverageOf(t, ns, "app", 2)
	refusedOnQuorum(t, "replica-1's write at epoch 1 to the newly covered ConfigMap", 1,
		func() error { return patchConfigMap(t, c1, ns, "out", `{"data":{"v":"late"}}`) })

	editor, _, err := env.UserClient("status-editor")
	if err != nil {
		t.Fatal(err)
	}
	env.Grant(t, ns, "policy-status-editor", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"},
		Resources: []string{"fencingpolicies/status"}, Verbs: []string{"get", "update", "patch"}}}, "status-editor")
	mustContain(t, "the status editor lowers the policy's coverage epoch",
		editor.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"status":{"coverageEpoch":0}}`))),
		apierrors.IsForbidden, "FencingPolicy "+ns+"/app: status.coverageGeneration and status.coverageEpoch (from 2 and 2 to 2 and 0)",
		"written by the fencekit operator", "not by status-editor")
	mustContain(t, "the status editor sets the coverage generation ahead",
		editor.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"status":{"coverageGeneration":9}}`))),
		apierrors.IsForbidden, "status.coverageGeneration and status.coverageEpoch", "not by status-editor")
	if err := editor.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"status":{"leaseEpoch":7}}`))); err != nil {
		t.Errorf("the status editor's write of another status field (the webhook trusts none): %v", err)
	}
	// Every try must still be refused.
	for i := range 10 {
		err := patchConfigMap(t, c1, ns, "out", `{"data":{"v":"forged"}}`)
		if err == nil {
			t.Errorf("replica-1's write at epoch 1, try %d after the coverage epoch was lowered to 0: admitted (on the copy: %v copy decisions so far); "+
				"the quorum read refuses it (lease l is at epoch 2)", i, leaseReads(t, "objects", "cache"))
			break
		}
		if !fencing.IsStale(err) {
			t.Fatalf("replica-1's write: %v, want stale", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	t.Logf("the policy's status now: coverage generation %d (generation %d), coverage epoch %d", p.Status.CoverageGeneration, p.Generation, p.Status.CoverageEpoch)
	if got := readConfigMap(t, ns, "out").Data["v"]; got == "forged" {
		t.Errorf("ConfigMap out holds replica-1's stale write %q", got)
	}
	a.s.set(false)
}
