package admission_test

import (
	"fmt"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The suite of fenced writes through fencekit's admission, on the real apiserver with the operator
// started in the test process (test/util/operatortest): the threat model's case table (TestCases), the
// webhooks' decisions on FencedResources and on the objects a FencingPolicy declares, the writes that need
// no token and their bounds, coverage, the webhooks' copy of the Lease, deletion, and the fenced Writer
// and fence-on-acquire against them.

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy(), testenv.WithUnthrottledUsers())
}

// worker is one lease contender; see testenv.Worker.
type worker = testenv.Worker

func newWorker(t *testing.T, ns, holder string) worker { return env.NewWorker(t, ns, holder) }

func declare(t *testing.T, ns, name, lease string) types.NamespacedName {
	t.Helper()
	return env.Declare(t, ns, name, lease)
}

// refusal is a write a test makes and wants refused: is reports whether the error has the expected reason,
// and msg holds parts of its message.
type refusal struct {
	name  string
	write func() error
	is    func(error) bool
	msg   []string
}

func get(t *testing.T, key types.NamespacedName) *fencingv1alpha1.FencedResource {
	t.Helper()
	return testenv.Read[fencingv1alpha1.FencedResource](t, env.Client, key.Namespace, key.Name)
}

// deleteAndWait deletes obj as an admin and waits until the apiserver no longer serves it.
func deleteAndWait(t *testing.T, obj client.Object) {
	t.Helper()
	what := fmt.Sprintf("%T %s/%s", obj, obj.GetNamespace(), obj.GetName())
	if err := env.Client.Delete(t.Context(), obj); err != nil {
		t.Fatalf("deleting %s: %v", what, err)
	}
	testenv.Eventually(t, what+" is gone", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err), fmt.Sprintf("finalizers %v: %s", obj.GetFinalizers(), testenv.ErrString(err))
	})
}

// deleteLeaseOverridingProtection deletes a Lease as a namespace admin who also removes the operator's
// protect finalizer (controllers.LeaseFinalizer, on every fenced Lease that FencedResources or
// FencingPolicies are bound to), and waits until the apiserver no longer serves it: the deliberate
// override that the residual cases of a deleted Lease start from.
func deleteLeaseOverridingProtection(t *testing.T, ns, name string) {
	t.Helper()
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := env.Client.Delete(t.Context(), l); err != nil {
		t.Fatalf("deleting lease %s/%s: %v", ns, name, err)
	}
	testenv.Eventually(t, fmt.Sprintf("lease %s/%s is gone, its protect finalizer removed", ns, name), func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(l), l)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err == nil && controllerutil.RemoveFinalizer(l, controllers.LeaseFinalizer) {
			err = env.Client.Update(t.Context(), l)
		}
		return false, fmt.Sprintf("finalizers %v: %s", l.Finalizers, testenv.ErrString(err))
	})
}

// isForbiddenByRBAC reports whether err is RBAC's refusal (it takes effect a moment after a grant).
func isForbiddenByRBAC(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "cannot ") && !strings.Contains(err.Error(), "denied")
}

// retryRBAC runs write until RBAC has taken effect, and returns its result.
func retryRBAC(t *testing.T, what string, write func() error) error {
	t.Helper()
	var err error
	testenv.Eventually(t, what+" is decided (RBAC granted)", func() (bool, string) {
		err = write()
		return err == nil || !isForbiddenByRBAC(err), testenv.ErrString(err)
	})
	return err
}
