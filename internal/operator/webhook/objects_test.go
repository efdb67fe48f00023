package webhook

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// A selector is matched against the labels of the object as it is before and after a write, on the sides
// where it exists: a policy selecting the ConfigMaps without label unfenced does not cover a create or a
// delete of one that has it.
func TestCoveringMatchesTheSidesThatExist(t *testing.T) {
	unfenced := fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l",
		Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "unfenced", Operator: metav1.LabelSelectorOpDoesNotExist}}}}}}}
	gr := schema.GroupResource{Resource: "configmaps"}
	marked, plain := map[string]string{"unfenced": "yes"}, map[string]string{"app": "x"}
	for name, tc := range map[string]struct {
		old, updated  map[string]string
		before, after bool
		want          bool
	}{
		"create of a marked object":       {updated: marked, after: true},
		"delete of a marked object":       {old: marked, before: true},
		"update of a marked object":       {old: marked, updated: marked, before: true, after: true},
		"create of an object without it":  {updated: plain, after: true, want: true},
		"create without labels":           {after: true, want: true},
		"update that removes the marking": {old: marked, updated: plain, before: true, after: true, want: true},
	} {
		got := len(covering([]fencingv1alpha1.FencingPolicy{unfenced}, gr, "", sides(tc.old, tc.updated, tc.before, tc.after)...)) == 1
		if got != tc.want {
			t.Errorf("%s: covered = %v, want %v", name, got, tc.want)
		}
	}
}
