package controllers_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

// statusCmp compares statuses without the conditions' transition times (the apiserver's clock) and
// regardless of the order of the conditions.
var statusCmp = []cmp.Option{
	cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime"),
	cmpopts.SortSlices(func(a, b metav1.Condition) bool { return a.Type < b.Type }),
	cmpopts.EquateEmpty(),
}

// worker is one lease contender; see testenv.Worker.
type worker = testenv.Worker

// startOperator runs the operator in process for t (operatortest.Start) and gives t a namespace of its own.
func startOperator(t *testing.T) (context.Context, string) {
	t.Helper()
	operatortest.Start(t, env)
	return t.Context(), env.Namespace(t)
}

func newWorker(t *testing.T, ns, holder string) worker { return env.NewWorker(t, ns, holder) }

func declare(t *testing.T, ns, name, lease string) types.NamespacedName {
	t.Helper()
	return env.Declare(t, ns, name, lease)
}

func getLease(t *testing.T, key types.NamespacedName) (*coordinationv1.Lease, error) {
	t.Helper()
	var l coordinationv1.Lease
	err := env.Client.Get(t.Context(), key, &l)
	return &l, err
}

// consistently checks cond every 50 ms for d and fails at the first time it does not hold. It is for
// what must not happen (a finalizer removed too early): the operator is given d to do it wrongly.
func consistently(t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, d, true, func(context.Context) (bool, error) {
		if ok, got := cond(); !ok {
			t.Fatalf("%s: no longer holds; seen: %s", what, got)
		}
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
}

// eventuallyStatus waits until the status of the FencedResource key, with observedGeneration filled in
// from its current generation, is want.
func eventuallyStatus(t *testing.T, what string, key types.NamespacedName, want fencingv1alpha1.FencedResourceStatus) *fencingv1alpha1.FencedResource {
	t.Helper()
	var fr fencingv1alpha1.FencedResource
	testenv.Eventually(t, what, func() (bool, string) {
		if err := env.Client.Get(t.Context(), key, &fr); err != nil {
			return false, err.Error()
		}
		w := want
		w.Conditions = slices.Clone(want.Conditions)
		w.ObservedGeneration = fr.Generation
		for i := range w.Conditions {
			w.Conditions[i].ObservedGeneration = fr.Generation
		}
		diff := cmp.Diff(w, fr.Status, statusCmp...)
		return diff == "", "status (-want +got):\n" + diff
	})
	return &fr
}
