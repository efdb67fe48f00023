package testenv

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Worker is a lease contender in tests that write Leases by hand: a user (Holder + "-user") bound to the
// fencekit-elector role, with a client authenticated as that user.
type Worker struct {
	User, Holder string
	Client       client.Client
	Config       *rest.Config
	// LeaseDuration is the duration Acquire writes (default 15 s).
	LeaseDuration time.Duration
	// Fences is the fence-on-acquire declaration Acquire writes, as pkg/elector writes what
	// Config.PostAcquire declares (none by default: the annotation is removed). Acquire does not fence: the
	// test runs pkg/fencing's hooks itself.
	Fences protocol.Fences
}

// NewWorker returns the Worker holder in namespace (requires WithLeasePolicy, which installs the role).
func (e *Env) NewWorker(t testing.TB, namespace, holder string) Worker {
	t.Helper()
	c, cfg := e.ElectorClient(t, namespace, holder+"-user")
	return Worker{User: holder + "-user", Holder: holder, Client: c, Config: cfg}
}

// Acquire writes the Lease namespace/name as pkg/elector does when it acquires at epoch (holder, epoch
// and acquirer annotations, fenced label, a fresh renewTime, a 15 s duration, managedFields reset),
// creating it if needed, and returns the Token the elector would hand out. Like the elector, it presents
// the epoch in the request (field manager fencing.fencekit.io/epoch=N), and fencekit's Lease policy holds
// it to the elector's rule: an existing fenced Lease at epoch e can only be acquired at e+1; a create
// chooses its starting epoch.
func (w Worker) Acquire(t testing.TB, namespace, name string, epoch int64) elector.Token {
	t.Helper()
	ctx := t.Context()
	duration := w.LeaseDuration
	if duration == 0 {
		duration = 15 * time.Second
	}
	// Read and compare-and-swap, again on a conflict, as the elector does: fencekit's operator writes the
	// Lease too (its finalizer), and such a write must not fail the acquisition. A conflict with another
	// acquisition still fails: the Lease policy refuses an epoch that is not the stored one plus one.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		err := w.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &lease)
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		lease.Namespace, lease.Name = namespace, name
		AcquiredBy(&lease, w.User, w.Holder, epoch, duration)
		if f := w.Fences.String(); f != "" {
			lease.Annotations[protocol.FencesAnnotation] = f
		} else {
			delete(lease.Annotations, protocol.FencesAnnotation)
		}
		if exists {
			lease.ManagedFields = []metav1.ManagedFieldsEntry{{}} // the acquisition records field ownership afresh
			return w.Client.Update(ctx, &lease, Presenting(epoch))
		}
		return w.Client.Create(ctx, &lease, Presenting(epoch))
	})
	if err != nil {
		t.Fatalf("%s acquiring lease %s at epoch %d: %v", w.Holder, name, epoch, err)
	}
	return elector.Token{Epoch: epoch, Lease: types.NamespacedName{Namespace: namespace, Name: name}, Holder: w.Holder}
}

// Release clears the holder of the Lease tok names, as pkg/elector releases it (an empty holder, a
// one-second duration, the epoch and acquirer kept), presenting tok's epoch.
func (w Worker) Release(t testing.TB, tok elector.Token) {
	t.Helper()
	w.update(t, tok, "releasing", func(l *coordinationv1.Lease, now *metav1.MicroTime) {
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To(""), ptr.To(int32(1)), now
	})
}

// Renew writes a fresh renewTime on the Lease tok names, as pkg/elector renews it (same epoch, holder and
// acquirer), presenting tok's epoch.
func (w Worker) Renew(t testing.TB, tok elector.Token) {
	t.Helper()
	w.update(t, tok, "renewing", func(l *coordinationv1.Lease, now *metav1.MicroTime) { l.Spec.RenewTime = now })
}

// update reads the Lease tok names, changes it with change (given the time now) and writes it back
// presenting tok's epoch, as every write of a holder at its epoch does.
func (w Worker) update(t testing.TB, tok elector.Token, doing string, change func(*coordinationv1.Lease, *metav1.MicroTime)) {
	t.Helper()
	ctx := t.Context()
	first := true
	// As the elector does: a conflict with a write of another field (the operator's finalizer, a label) is
	// written again on top of it, while the Lease still names this holder at this epoch.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		if err := w.Client.Get(ctx, tok.Lease, &lease); err != nil {
			return err
		}
		if !first && (ptr.Deref(lease.Spec.HolderIdentity, "") != tok.Holder || lease.Annotations[protocol.EpochAnnotation] != strconv.FormatInt(tok.Epoch, 10)) {
			return fmt.Errorf("the Lease changed hands under the write (holder %q, epoch %q)", ptr.Deref(lease.Spec.HolderIdentity, ""), lease.Annotations[protocol.EpochAnnotation])
		}
		first = false
		now := metav1.NewMicroTime(time.Now())
		change(&lease, &now)
		return w.Client.Update(ctx, &lease, Presenting(tok.Epoch))
	})
	if err != nil {
		t.Fatalf("%s %s lease %s at epoch %d: %v", w.Holder, doing, tok.Lease.Name, tok.Epoch, err)
	}
}

// ReadLease reads the Lease namespace/name as an admin.
func (e *Env) ReadLease(t testing.TB, namespace, name string) *coordinationv1.Lease {
	t.Helper()
	return Read[coordinationv1.Lease](t, e.Client, namespace, name)
}

// WantPolicy fails t unless err is the answer want of fencekit's Lease policy to a write: admitted for "",
// otherwise Forbidden with a message that contains want.
func WantPolicy(t testing.TB, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("want admitted, got %v", err)
		}
		return
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("want Forbidden %q, got %v", want, err)
	}
}

// Presenting is the write option that presents epoch in the request, as pkg/elector does on every Lease
// write: the field manager fencing.fencekit.io/epoch=N.
func Presenting(epoch int64) client.FieldOwner {
	return client.FieldOwner(protocol.FieldManagerFor(epoch))
}

// AcquiredBy sets lease to what pkg/elector writes when user, as holder, acquires it at epoch: the epoch
// and acquirer annotations, the fenced label, the holder, a fresh acquire and renew time, the duration.
// Write it presenting the epoch (Presenting(epoch)), as the elector does.
func AcquiredBy(lease *coordinationv1.Lease, user, holder string, epoch int64, duration time.Duration) {
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Labels[protocol.FencedLabel] = "true"
	lease.Annotations[protocol.EpochAnnotation] = strconv.FormatInt(epoch, 10)
	lease.Annotations[protocol.AcquirerAnnotation] = user
	// leaseTransitions: 0 on create, +1 on every other acquisition.
	var transitions int32
	if lease.ResourceVersion != "" {
		transitions = ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec = coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(duration / time.Second)),
		AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(transitions),
	}
}

// Declare creates a FencedResource bound to lease, with no data, as an admin or a GitOps tool would.
func (e *Env) Declare(t testing.TB, namespace, name, lease string) types.NamespacedName {
	t.Helper()
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: lease},
	}
	if err := e.Client.Create(t.Context(), fr); err != nil {
		t.Fatalf("declaring FencedResource %s: %v", name, err)
	}
	return client.ObjectKeyFromObject(fr)
}
