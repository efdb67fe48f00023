package controllers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/dev/devcluster"
	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// startOperatorAs runs the operator in process as the given ServiceAccount user, bound to the generated
// fencekit-manager ClusterRole (config/rbac/role.yaml) and not a member of system:masters, so that the
// Lease policy applies to it as in a cluster. operatortest.Start runs it as an admin.
func startOperatorAs(t *testing.T, user string) {
	t.Helper()
	ctx := t.Context()
	if err := devcluster.ApplyFiles(ctx, env.Client, filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml")); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fencekit-manager-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "fencekit-manager"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), binding) })
	_, cfg, err := env.UserClient(user, "system:serviceaccounts", "system:authenticated")
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS = -1 // as controller-runtime's GetConfig, which cmd/manager uses
	w := env.Environment.WebhookInstallOptions
	operatortest.StartWith(t, cfg, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: w.LocalServingHost, WebhookPort: w.LocalServingPort, WebhookCertDir: w.LocalServingCertDir,
		SkipNameValidation: true,
	})
}

// TestOperatorWithItsOwnRole runs the operator with only the permissions the manifests give it: it still
// reads Leases for the webhook, keeps status, protects and releases Leases (under the Lease policy, which
// lets a non-acquirer change only metadata) and records Events.
func TestOperatorWithItsOwnRole(t *testing.T) {
	startOperatorAs(t, "system:serviceaccount:fencekit-system:fencekit-manager")
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key := declare(t, ns, "orders", "orders-writer")
	lease := types.NamespacedName{Namespace: ns, Name: "orders-writer"}
	ta := a.Acquire(t, ns, lease.Name, 1)

	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a1"}); err != nil {
		t.Fatalf("the holder's write: %v", err)
	}
	eventuallyStatus(t, "status at the lease's epoch", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 1, Holder: "worker-a", LeaseEpoch: 1, LeaseHolder: "worker-a",
			Conditions: atLeaseEpoch("1")})
	testenv.Eventually(t, "the finalizer added to the fenced lease", protectedIs(t, lease, true))

	_, err := fencing.NewWriter(b.Client).Set(ctx, ta, key, map[string]any{"v": "copied"})
	if !fencing.IsNotHolder(err) {
		t.Fatalf("worker-b's write with worker-a's token: got %v, want a not-holder refusal", err)
	}
	eventuallyEvent(t, ns, "orders", protocol.ReasonNotHolder,
		fmt.Sprintf(`user "worker-b-user" is not the user that acquired lease orders-writer at epoch 1 ("worker-a-user"): only the holder worker-a may write FencedResource %s/orders`, ns))

	deleteFencedResource(t, key)
	testenv.Eventually(t, "the finalizer removed from the fenced lease", protectedIs(t, lease, false))
}
