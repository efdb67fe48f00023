package operator_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The operator's own tests: its election, its metrics endpoint, its build information. What its webhooks
// admit and refuse is tested in test/admission.

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

func declare(t *testing.T, ns, name, lease string) types.NamespacedName {
	t.Helper()
	return env.Declare(t, ns, name, lease)
}

func get(t *testing.T, key types.NamespacedName) *fencingv1alpha1.FencedResource {
	t.Helper()
	return testenv.Read[fencingv1alpha1.FencedResource](t, env.Client, key.Namespace, key.Name)
}
