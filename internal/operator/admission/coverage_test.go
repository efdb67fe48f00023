package admission

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// A selector is matched against the labels of the object as it is before and after a write, on the sides
// where it exists: a policy selecting the ConfigMaps without label unfenced does not cover a create or a
// delete of one that has it.
func TestCoverageMatchesTheSidesThatExist(t *testing.T) {
	unfenced := fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "l",
		Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "unfenced", Operator: metav1.LabelSelectorOpDoesNotExist}}}}}}}
	gr := schema.GroupResource{Resource: "configmaps"}
	marked, plain := map[string]string{"unfenced": "yes"}, map[string]string{"app": "x"}
	for name, tc := range map[string]struct {
		old, updated  map[string]string
		before, after bool
		// wantBefore and wantAfter are the coverage on each side; the object is fenced if either holds.
		wantBefore, wantAfter bool
	}{
		"create of a marked object":       {updated: marked, after: true},
		"delete of a marked object":       {old: marked, before: true},
		"update of a marked object":       {old: marked, updated: marked, before: true, after: true},
		"create of an object without it":  {updated: plain, after: true, wantAfter: true},
		"create without labels":           {after: true, wantAfter: true},
		"update that removes the marking": {old: marked, updated: plain, before: true, after: true, wantAfter: true},
		"update that adds the marking":    {old: plain, updated: marked, before: true, after: true, wantBefore: true},
	} {
		c := CoverageOf([]fencingv1alpha1.FencingPolicy{unfenced}, gr, "", "cm", tc.old, tc.updated, tc.before, tc.after)
		if c.Before != tc.wantBefore || c.After != tc.wantAfter || (len(c.Policies) == 1) != (tc.wantBefore || tc.wantAfter) {
			t.Errorf("%s: before %v, after %v, %d policies; want before %v, after %v", name, c.Before, c.After, len(c.Policies), tc.wantBefore, tc.wantAfter)
		}
	}
}

// The policies are ordered by name and the first binds the object; one bound to another Lease is the
// conflict; the copy may decide only when every covering policy recorded its generation, above the highest
// coverage epoch; and the cluster's own kube-root-ca.crt is covered by none.
func TestCoverageOfSeveralPolicies(t *testing.T) {
	policy := func(name, lease string, generation, recorded, epoch int64) fencingv1alpha1.FencingPolicy {
		return fencingv1alpha1.FencingPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name, Generation: generation},
			Spec:       fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps"}}},
			Status:     fencingv1alpha1.FencingPolicyStatus{CoverageGeneration: recorded, CoverageEpoch: epoch},
		}
	}
	gr := schema.GroupResource{Resource: "configmaps"}
	other := fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a-secrets"}, Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "x",
		Resources: []fencingv1alpha1.FencedObjects{{Resource: "secrets"}}}}

	c := CoverageOf([]fencingv1alpha1.FencingPolicy{policy("c", "l", 2, 2, 9), other, policy("b", "l", 1, 1, 4)}, gr, "", "cm", nil, nil, true, true)
	if len(c.Policies) != 2 || c.Policies[0].Name != "b" || c.Conflict != nil || !c.Recorded || c.Epoch != 9 || !c.Before || !c.After {
		t.Errorf("two policies of one Lease: %+v; want b then c, no conflict, recorded, epoch 9, covered on both sides", c)
	}
	c = CoverageOf([]fencingv1alpha1.FencingPolicy{policy("c", "l", 3, 2, 9), policy("b", "l", 1, 1, 4)}, gr, "", "cm", nil, nil, true, true)
	if c.Recorded {
		t.Errorf("policy c at generation 3 recorded coverage for generation 2 only: Recorded = true, want false")
	}
	c = CoverageOf([]fencingv1alpha1.FencingPolicy{policy("c", "m", 1, 1, 1), policy("b", "l", 1, 1, 1)}, gr, "", "cm", nil, nil, true, true)
	if c.Conflict == nil || c.Conflict.Name != "c" || len(c.Policies) == 0 || c.Policies[0].Name != "b" {
		t.Errorf("policies of leases l (b) and m (c): %+v; want c in conflict with b", c)
	}
	c = CoverageOf([]fencingv1alpha1.FencingPolicy{policy("b", "l", 1, 1, 1)}, gr, "", "kube-root-ca.crt", nil, nil, true, true)
	if len(c.Policies) != 0 || c.Before || c.After {
		t.Errorf("ConfigMap kube-root-ca.crt: %+v; want covered by no policy", c)
	}
}
