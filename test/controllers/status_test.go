package controllers_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/pkg/protocol"
)

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg}
}

// The conditions of each state a FencedResource bound to lease orders-writer can be in.
func leaseNotFound(ns string) []metav1.Condition {
	return []metav1.Condition{
		cond(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseNotFound,
			"lease orders-writer does not exist in namespace "+ns+"; every fenced write is refused until an elector creates it"),
		cond(fencingv1alpha1.ConditionFenced, metav1.ConditionUnknown, fencingv1alpha1.ReasonLeaseNotFound, "no lease to compare epochs with"),
		cond(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseNotFound,
			"lease orders-writer does not exist in namespace "+ns+"; every fenced write is refused until an elector creates it"),
	}
}

func leaseInvalid(why string) []metav1.Condition {
	return []metav1.Condition{
		cond(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseInvalid, "lease orders-writer cannot fence: "+why),
		cond(fencingv1alpha1.ConditionFenced, metav1.ConditionUnknown, fencingv1alpha1.ReasonLeaseInvalid, "the lease has no valid epoch"),
		cond(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, fencingv1alpha1.ReasonLeaseInvalid, "lease orders-writer cannot fence: "+why),
	}
}

func atLeaseEpoch(epoch string) []metav1.Condition {
	return []metav1.Condition{
		cond(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionTrue, fencingv1alpha1.ReasonLeaseFound, "lease orders-writer is at epoch "+epoch),
		cond(fencingv1alpha1.ConditionFenced, metav1.ConditionTrue, fencingv1alpha1.ReasonAtLeaseEpoch,
			"at the lease's epoch "+epoch+": writes from earlier epochs are refused"),
		cond(fencingv1alpha1.ConditionReady, metav1.ConditionTrue, fencingv1alpha1.ReasonFenced, "the lease exists and this resource is at its epoch"),
	}
}

func behindLease(epoch, leaseEpoch string) []metav1.Condition {
	return []metav1.Condition{
		cond(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionTrue, fencingv1alpha1.ReasonLeaseFound, "lease orders-writer is at epoch "+leaseEpoch),
		cond(fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, fencingv1alpha1.ReasonBehindLease,
			"at epoch "+epoch+", behind the lease's epoch "+leaseEpoch+": the admission webhook still refuses writes below "+leaseEpoch),
		cond(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, fencingv1alpha1.ReasonBehindLease,
			"at epoch "+epoch+", behind the lease's epoch "+leaseEpoch+": the admission webhook still refuses writes below "+leaseEpoch),
	}
}

func withGeneration(conds []metav1.Condition, gen int64) []metav1.Condition {
	for i := range conds {
		conds[i].ObservedGeneration = gen
	}
	return conds
}

func TestComputeStatus(t *testing.T) {
	const gen = 7
	fr := func(epoch int64, writer string) *fencingv1alpha1.FencedResource {
		f := &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", Generation: gen, Annotations: map[string]string{}},
			Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer", Epoch: epoch},
		}
		if writer != "" {
			f.Annotations[fencingv1alpha1.WriterAnnotation] = writer
		}
		return f
	}
	lease := func(epoch, holder string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders-writer",
			Annotations: map[string]string{protocol.EpochAnnotation: epoch, protocol.AcquirerAnnotation: holder + "-user"}}}
		l.Spec.HolderIdentity = ptr.To(holder)
		return l
	}
	tests := map[string]struct {
		fr    *fencingv1alpha1.FencedResource
		lease *coordinationv1.Lease
		want  fencingv1alpha1.FencedResourceStatus
	}{
		"declared, lease missing": {
			fr: fr(0, ""),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen,
				Conditions: withGeneration(leaseNotFound("ns"), gen)},
		},
		"written, then the lease went missing": {
			fr: fr(3, "worker-a"),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, AdmittedEpoch: 3, Holder: "worker-a",
				Conditions: withGeneration(leaseNotFound("ns"), gen)},
		},
		"lease with a garbage epoch": {
			fr: fr(0, ""), lease: lease("garbage", "worker-a"),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, LeaseHolder: "worker-a",
				Conditions: withGeneration(leaseInvalid(`its fencing.fencekit.io/epoch annotation "garbage" is not an epoch >= 1`), gen)},
		},
		"lease of plain client-go leader election (no epoch)": {
			fr: fr(0, ""), lease: func() *coordinationv1.Lease { l := lease("1", "worker-a"); l.Annotations = nil; return l }(),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, LeaseHolder: "worker-a",
				Conditions: withGeneration(leaseInvalid("it has no fencing.fencekit.io/epoch annotation (no fencekit elector has acquired it)"), gen)},
		},
		"declared, lease acquired": {
			fr: fr(0, ""), lease: lease("3", "worker-a"),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, LeaseEpoch: 3, LeaseHolder: "worker-a",
				Conditions: withGeneration(behindLease("0", "3"), gen)},
		},
		"written at the lease's epoch": {
			fr: fr(3, "worker-a"), lease: lease("3", "worker-a"),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 3, LeaseHolder: "worker-a",
				Conditions: withGeneration(atLeaseEpoch("3"), gen)},
		},
		"written, then the lease was released": {
			fr: fr(3, "worker-a"), lease: lease("3", ""),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 3,
				Conditions: withGeneration(atLeaseEpoch("3"), gen)},
		},
		"a new holder acquired": {
			fr: fr(3, "worker-a"), lease: lease("4", "worker-b"),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 4, LeaseHolder: "worker-b",
				Conditions: withGeneration(behindLease("3", "4"), gen)},
		},
		"ahead of a recreated lease": {
			fr: fr(5, "worker-a"), lease: lease("2", "worker-b"),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, AdmittedEpoch: 5, Holder: "worker-a", LeaseEpoch: 2, LeaseHolder: "worker-b",
				Conditions: withGeneration([]metav1.Condition{
					cond(fencingv1alpha1.ConditionLeaseFound, metav1.ConditionTrue, fencingv1alpha1.ReasonLeaseFound, "lease orders-writer is at epoch 2"),
					cond(fencingv1alpha1.ConditionFenced, metav1.ConditionFalse, fencingv1alpha1.ReasonAheadOfLease,
						"at epoch 5, ahead of the lease's epoch 2: the lease was recreated"),
					cond(fencingv1alpha1.ConditionReady, metav1.ConditionFalse, fencingv1alpha1.ReasonAheadOfLease,
						"at epoch 5, ahead of the lease's epoch 2: the lease was recreated"),
				}, gen)},
		},
		"a writer annotation at epoch 0 is no holder": {
			fr: fr(0, "worker-a"), lease: lease("1", "worker-a"),
			want: fencingv1alpha1.FencedResourceStatus{ObservedGeneration: gen, LeaseEpoch: 1, LeaseHolder: "worker-a",
				Conditions: withGeneration(behindLease("0", "1"), gen)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := controllers.ComputeStatus(tc.fr, tc.lease)
			if diff := cmp.Diff(tc.want, got, statusCmp...); diff != "" {
				t.Errorf("ComputeStatus() (-want +got):\n%s", diff)
			}
			for _, c := range got.Conditions {
				if c.LastTransitionTime.IsZero() {
					t.Errorf("condition %s has no lastTransitionTime", c.Type)
				}
			}
		})
	}
}

// TestComputeStatusTransitionTimes: a condition that keeps its status keeps its lastTransitionTime; one
// that changes gets a new one.
func TestComputeStatusTransitionTimes(t *testing.T) {
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", Generation: 2,
			Annotations: map[string]string{fencingv1alpha1.WriterAnnotation: "worker-a"}},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer", Epoch: 3},
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders-writer",
		Annotations: map[string]string{protocol.EpochAnnotation: "3"}}}
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	fr.Status = controllers.ComputeStatus(fr, lease)
	for i := range fr.Status.Conditions {
		fr.Status.Conditions[i].LastTransitionTime = then
	}

	lease.Annotations[protocol.EpochAnnotation] = "4"
	got := controllers.ComputeStatus(fr, lease)
	want := map[string]bool{ // condition type -> keeps its transition time
		fencingv1alpha1.ConditionLeaseFound: true,
		fencingv1alpha1.ConditionFenced:     false,
		fencingv1alpha1.ConditionReady:      false,
	}
	for _, c := range got.Conditions {
		if kept := c.LastTransitionTime.Equal(&then); kept != want[c.Type] {
			t.Errorf("condition %s (now %s): transition time kept = %v, want %v", c.Type, c.Status, kept, want[c.Type])
		}
	}
	if len(got.Conditions) != len(want) {
		t.Errorf("got %d conditions, want %d: %v", len(got.Conditions), len(want), got.Conditions)
	}
}
