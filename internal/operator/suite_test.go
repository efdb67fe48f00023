package operator_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/internal/testenv"
	"github.com/fencekit/fencekit/pkg/elector"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

func startOperator(t *testing.T, change ...func(*operator.Options)) (stop func()) {
	return env.StartOperator(t, change...)
}

// worker is one lease contender: an authenticated user with the fencekit-elector role.
type worker struct {
	user   string
	holder string
	client client.Client
}

func newWorker(t *testing.T, ns, holder string) worker {
	c, _ := env.ElectorClient(t, ns, holder+"-user")
	return worker{user: holder + "-user", holder: holder, client: c}
}

// acquire writes the Lease as pkg/elector does when it acquires at epoch: holder, acquirer, fenced label.
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
		AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](int32(epoch)),
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

// declare creates a FencedResource bound to lease, with no data, as an admin or GitOps tool would.
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

func get(t *testing.T, key types.NamespacedName) *fencingv1alpha1.FencedResource {
	t.Helper()
	var fr fencingv1alpha1.FencedResource
	if err := env.Client.Get(t.Context(), key, &fr); err != nil {
		t.Fatal(err)
	}
	return &fr
}

// eventually polls cond until it holds or 30 s pass (the operator reconciles asynchronously).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, got := cond()
		last = got
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: never happened; last seen: %s", what, last)
	}
}
