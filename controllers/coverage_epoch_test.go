package controllers

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// A policy's coverage epoch from its Lease as read after the policy's generation was observed. A malformed
// epoch annotation (written by hand) is not read as 0, which would let the Lease's copy decide the policy's
// objects at any epoch once the annotation is repaired: the coverage stays unrecorded.
func TestCoverageEpoch(t *testing.T) {
	lease := func(epoch string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{protocol.EpochAnnotation: epoch}}}
	}
	for name, tc := range map[string]struct {
		lease     *coordinationv1.Lease
		epoch     int64
		recording bool
	}{
		"no Lease":                {nil, 0, true},
		"a Lease with no epoch":   {&coordinationv1.Lease{}, 0, true},
		"a Lease at epoch 7":      {lease("7"), 7, true},
		"a malformed epoch":       {lease("seven"), 0, false},
		"an epoch of 0":           {lease("0"), 0, false},
		"an epoch above MaxEpoch": {lease("9007199254740992"), 0, false},
	} {
		epoch, known := coverageEpoch(tc.lease)
		if known != tc.recording || (known && epoch != tc.epoch) {
			t.Errorf("%s: coverageEpoch = %d, %v; want %d, %v", name, epoch, known, tc.epoch, tc.recording)
		}
	}
}
