package elector

import (
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// acquisition is what one acquire write sets.
type acquisition struct {
	identity      string
	acquirer      string
	epoch         int64
	fences        protocol.Fences
	leaseDuration time.Duration
	now           time.Time // wall clock, for acquireTime/renewTime (informational only)
}

// newLease builds the Lease that a Create acquires.
func newLease(namespace, name string, a acquisition) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	applyAcquisition(l, a)
	return l
}

// applyAcquisition turns l (a copy of the Lease as last read) into the acquiring write: holder, times,
// duration, transitions + 1, the epoch, acquirer and fences annotations, the fenced label and, on a Lease
// that exists, managedFields reset (resetManagedFields). The fences annotation says what this acquisition
// fences, never what an earlier one declared: it is removed when this elector fences nothing, and the
// Lease policy then refuses the acquisition of a Lease that declared more (the elector must not inherit a
// promise it does not keep).
func applyAcquisition(l *coordinationv1.Lease, a acquisition) {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[protocol.EpochAnnotation] = strconv.FormatInt(a.epoch, 10)
	l.Annotations[protocol.AcquirerAnnotation] = a.acquirer
	if f := a.fences.String(); f != "" {
		l.Annotations[protocol.FencesAnnotation] = f
	} else {
		delete(l.Annotations, protocol.FencesAnnotation)
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[protocol.FencedLabel] = "true"
	id := a.identity
	secs := leaseSeconds(a.leaseDuration)
	now := microTime(a.now)
	var transitions int32
	if l.Spec.LeaseTransitions != nil {
		transitions = *l.Spec.LeaseTransitions
	}
	if l.CreationTimestamp.IsZero() && l.ResourceVersion == "" {
		transitions = 0
	} else {
		transitions++
	}
	l.Spec.HolderIdentity = &id
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.AcquireTime = &now
	l.Spec.RenewTime = &now
	l.Spec.LeaseTransitions = &transitions
	if l.ResourceVersion != "" {
		l.ManagedFields = resetManagedFields()
	}
}

// resetManagedFields is the managedFields an acquiring write sends: one empty entry, which makes the
// apiserver record the Lease's field ownership afresh. The entries earlier writers left (any user who may
// update the Lease can send entries of any size) do not outlive the term they were written in, so the new
// holder's renewals do not carry them.
func resetManagedFields() []metav1.ManagedFieldsEntry { return []metav1.ManagedFieldsEntry{{}} }

// renewalOf returns the renewal of held, the Lease as last written by this holder: a copy that shares
// held's maps and slices and its spec's other pointers, and points at a renewTime and a
// leaseDurationSeconds of its own. Neither applyRenewal nor the request, which encodes the copy, writes
// through them, so held stays as it was (a deep copy per renewal was 3 % of a leader's allocation).
func renewalOf(held *coordinationv1.Lease, now time.Time, leaseDuration time.Duration) *coordinationv1.Lease {
	l := *held
	applyRenewal(&l, now, leaseDuration)
	return &l
}

// applyRenewal turns l (the Lease as last written by this holder) into a renewal: it replaces the spec's
// renewTime and leaseDurationSeconds pointers and writes nothing else.
func applyRenewal(l *coordinationv1.Lease, now time.Time, leaseDuration time.Duration) {
	t := microTime(now)
	secs := leaseSeconds(leaseDuration)
	l.Spec.RenewTime = &t
	l.Spec.LeaseDurationSeconds = &secs
}

// microTime is t as the apiserver stores a MicroTime: to the microsecond, without a monotonic reading. The
// version a renewal wrote is then the one stored (leaseRequests.renew does not read it back).
func microTime(t time.Time) metav1.MicroTime {
	return metav1.NewMicroTime(t.Truncate(time.Microsecond))
}

// applyRelease turns l into a release: no holder, as client-go writes it (an empty holder identity and a
// one-second duration); the epoch and acquirer annotations stay.
func applyRelease(l *coordinationv1.Lease, now time.Time) {
	t := microTime(now)
	empty := ""
	one := int32(1)
	l.Spec.HolderIdentity = &empty
	l.Spec.LeaseDurationSeconds = &one
	l.Spec.RenewTime = &t
}
