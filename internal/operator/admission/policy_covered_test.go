package admission

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// A policy with a selector covers a write of an object it does not select only through a subresource
// that carries none of the object's labels (a Scale, an Eviction, a Binding); a write that carries the
// object (its status, a Pod's ephemeral containers or resize) is judged by the object's labels.
func TestCoveredBySubresource(t *testing.T) {
	policies := []fencingv1alpha1.FencingPolicy{{Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l",
		Resources: []fencingv1alpha1.FencedObjects{{Resource: "pods", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}}}}
	for _, tc := range []struct {
		sub    string
		labels map[string]string
		want   bool
	}{
		{"", map[string]string{"team": "a"}, true},
		{"", map[string]string{"team": "b"}, false},
		{"status", map[string]string{"team": "b"}, false},
		{"ephemeralcontainers", map[string]string{"team": "b"}, false},
		{"ephemeralcontainers", map[string]string{"team": "a"}, true},
		{"resize", map[string]string{"team": "b"}, false},
		{"eviction", nil, true},
		{"binding", nil, true},
	} {
		if got := Covered(policies, "", "pods", tc.sub, tc.labels); got != tc.want {
			t.Errorf("Covered(pods/%s, labels %v) = %v, want %v", tc.sub, tc.labels, got, tc.want)
		}
	}
}
