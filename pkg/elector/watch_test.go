package elector

import (
	"maps"
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// The elector keeps each version of a Lease trimmed: no managedFields, and the labels map shared by every
// Lease that carries the fenced label alone. An acquisition written on such a Lease writes a copy and leaves
// the shared map as it was; a Lease with labels of its own keeps them.
func TestTrim(t *testing.T) {
	fenced := map[string]string{protocol.FencedLabel: "true"}
	cases := []struct {
		name       string
		labels     map[string]string
		wantShared bool
	}{
		{"the fenced label alone", map[string]string{protocol.FencedLabel: "true"}, true},
		{"the fenced label and another", map[string]string{protocol.FencedLabel: "true", "team": "a"}, false},
		{"the fenced label with another value", map[string]string{protocol.FencedLabel: "false"}, false},
		{"no labels", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: "7", Labels: maps.Clone(tc.labels),
				Annotations:   map[string]string{protocol.EpochAnnotation: "3"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: protocol.FieldManagerFor(3)}}}}
			trim(l)
			got := l
			if got.ManagedFields != nil {
				t.Errorf("managedFields = %v, want none", got.ManagedFields)
			}
			if !maps.Equal(got.Labels, tc.labels) {
				t.Errorf("labels = %v, want %v", got.Labels, tc.labels)
			}
			shared := got.Labels != nil && len(tc.labels) > 0 && sameMap(got.Labels, fencedLabels)
			if shared != tc.wantShared {
				t.Errorf("labels shared = %t, want %t", shared, tc.wantShared)
			}
			w := got.DeepCopy()
			applyAcquisition(w, acquisition{identity: "b", acquirer: "u", epoch: 4, leaseDuration: 15 * time.Second, now: time.Unix(0, 0)})
			w.Labels["written"] = "by the acquisition's copy"
			if !maps.Equal(fencedLabels, fenced) {
				t.Fatalf("the shared labels map changed to %v", fencedLabels)
			}
			if !maps.Equal(got.Labels, tc.labels) {
				t.Errorf("the watched Lease's labels changed to %v, want %v", got.Labels, tc.labels)
			}
		})
	}
}

// sameMap reports whether a and b are one map (not two equal ones).
func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
