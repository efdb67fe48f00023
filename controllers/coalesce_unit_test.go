package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// TestOnlyGenerationDiffers: only a status that changes nothing but observedGeneration may wait; any other
// change is written at once.
func TestOnlyGenerationDiffers(t *testing.T) {
	base := func() fencingv1alpha1.FencedResourceStatus {
		return fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 3, LeaseHolder: "worker-a",
			ObservedGeneration: 5, Conditions: []metav1.Condition{{Type: fencingv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
				Reason: fencingv1alpha1.ReasonFenced, Message: "m", ObservedGeneration: 5}}}
	}
	tests := map[string]struct {
		change func(*fencingv1alpha1.FencedResourceStatus)
		want   bool
	}{
		"a data write: observedGeneration only": {func(s *fencingv1alpha1.FencedResourceStatus) {
			s.ObservedGeneration, s.Conditions[0].ObservedGeneration = 9, 9
		}, true},
		"a new lease epoch": {func(s *fencingv1alpha1.FencedResourceStatus) {
			s.ObservedGeneration, s.LeaseEpoch = 9, 4
		}, false},
		"a new lease holder":   {func(s *fencingv1alpha1.FencedResourceStatus) { s.LeaseHolder = "worker-b" }, false},
		"a new admitted epoch": {func(s *fencingv1alpha1.FencedResourceStatus) { s.AdmittedEpoch = 4 }, false},
		"a new writer":         {func(s *fencingv1alpha1.FencedResourceStatus) { s.Holder = "worker-b" }, false},
		"a condition's status": {func(s *fencingv1alpha1.FencedResourceStatus) { s.Conditions[0].Status = metav1.ConditionFalse }, false},
		"a condition's reason": {func(s *fencingv1alpha1.FencedResourceStatus) { s.Conditions[0].Reason = "Other" }, false},
		"a new condition": {func(s *fencingv1alpha1.FencedResourceStatus) {
			s.Conditions = append(s.Conditions, metav1.Condition{Type: fencingv1alpha1.ConditionFenced})
		}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := base()
			tc.change(&b)
			if got := onlyGenerationDiffers(base(), b); got != tc.want {
				t.Errorf("onlyGenerationDiffers = %v, want %v", got, tc.want)
			}
		})
	}
}
