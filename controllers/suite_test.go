package controllers_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/testenv"
	"github.com/fencekit/fencekit/pkg/elector"
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

// worker is one lease contender: an authenticated user bound to the fencekit-elector role.
type worker struct {
	user   string
	holder string
	client client.Client
}

func newWorker(t *testing.T, ns, holder string) worker {
	c, _ := env.ElectorClient(t, ns, holder+"-user")
	return worker{user: holder + "-user", holder: holder, client: c}
}

// acquire writes the Lease as pkg/elector does when it acquires at epoch: holder, acquirer annotation,
// epoch annotation, fenced label, a fresh renewTime; it creates the Lease if it does not exist.
func (w worker) acquire(t *testing.T, ns, name string, epoch int64) elector.Token {
	t.Helper()
	ctx := t.Context()
	var lease coordinationv1.Lease
	err := w.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &lease)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	lease.Namespace, lease.Name = ns, name
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Labels[elector.FencedLabel] = "true"
	lease.Annotations[elector.EpochAnnotation] = strconv.FormatInt(epoch, 10)
	lease.Annotations[elector.AcquirerAnnotation] = w.user
	now := metav1.NewMicroTime(time.Now())
	lease.Spec = coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(w.holder), LeaseDurationSeconds: ptr.To[int32](15),
		AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(int32(epoch)),
	}
	if exists {
		err = w.client.Update(ctx, &lease)
	} else {
		err = w.client.Create(ctx, &lease)
	}
	if err != nil {
		t.Fatalf("%s acquiring lease %s at epoch %d: %v", w.holder, name, epoch, err)
	}
	return elector.Token{Epoch: epoch, Lease: types.NamespacedName{Namespace: ns, Name: name}, Holder: w.holder}
}

// declare creates a FencedResource bound to lease, with no data, as an admin or a GitOps tool would.
func declare(t *testing.T, ns, name, lease string) types.NamespacedName {
	t.Helper()
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: lease},
	}
	if err := env.Client.Create(t.Context(), fr); err != nil {
		t.Fatalf("declaring FencedResource %s: %v", name, err)
	}
	return client.ObjectKeyFromObject(fr)
}

func getLease(t *testing.T, key types.NamespacedName) (*coordinationv1.Lease, error) {
	t.Helper()
	var l coordinationv1.Lease
	err := env.Client.Get(t.Context(), key, &l)
	return &l, err
}

// eventually polls cond every 20 ms until it holds, for at most 30 s (the operator reconciles
// asynchronously); cond returns what it saw, for the failure message.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, got := cond()
		last = got
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: never happened in 30s; last seen: %s", what, last)
	}
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
	eventually(t, what, func() (bool, string) {
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
