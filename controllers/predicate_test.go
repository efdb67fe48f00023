package controllers

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/fencekit/fencekit/pkg/protocol"
)

func TestLeaseChanges(t *testing.T) {
	base := func() *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "l", Annotations: map[string]string{protocol.EpochAnnotation: "5"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](15),
				RenewTime: ptr.To(metav1.NewMicroTime(time.Unix(100, 0)))},
		}
	}
	tests := map[string]struct {
		change func(*coordinationv1.Lease)
		want   bool
	}{
		"renewal":        {func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Unix(102, 0))) }, false},
		"label":          {func(l *coordinationv1.Lease) { l.Labels = map[string]string{"team": "x"} }, false},
		"new holder":     {func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("b") }, true},
		"released":       {func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }, true},
		"new epoch":      {func(l *coordinationv1.Lease) { l.Annotations[protocol.EpochAnnotation] = "6" }, true},
		"finalizer":      {func(l *coordinationv1.Lease) { l.Finalizers = []string{LeaseFinalizer} }, true},
		"being deleted":  {func(l *coordinationv1.Lease) { l.DeletionTimestamp = ptr.To(metav1.Now()) }, true},
		"nothing at all": {func(*coordinationv1.Lease) {}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := base()
			tc.change(l)
			if got := leaseChanges.Update(event.UpdateEvent{ObjectOld: base(), ObjectNew: l}); got != tc.want {
				t.Errorf("leaseChanges = %v, want %v", got, tc.want)
			}
		})
	}
}
