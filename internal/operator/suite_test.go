package operator_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

// worker is one lease contender; see testenv.Worker.
type worker = testenv.Worker

func newWorker(t *testing.T, ns, holder string) worker { return env.NewWorker(t, ns, holder) }

func declare(t *testing.T, ns, name, lease string) types.NamespacedName {
	t.Helper()
	return env.Declare(t, ns, name, lease)
}

func get(t *testing.T, key types.NamespacedName) *fencingv1alpha1.FencedResource {
	t.Helper()
	var fr fencingv1alpha1.FencedResource
	if err := env.Client.Get(t.Context(), key, &fr); err != nil {
		t.Fatal(err)
	}
	return &fr
}
