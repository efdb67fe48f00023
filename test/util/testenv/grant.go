package testenv

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Grant creates, as the admin, a Role name in namespace with rules and a RoleBinding of it to users, so that
// what a test then sees refused is fencekit's doing, not RBAC's. RBAC takes effect a moment later: write
// the first request inside Eventually.
func (e *Env) Grant(t testing.TB, namespace, name string, rules []rbacv1.PolicyRule, users ...string) {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}}
	for _, u := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
	}
	for _, o := range []client.Object{role, binding} {
		if err := e.Client.Create(t.Context(), o); err != nil {
			t.Fatalf("granting %s in %s: %v", name, namespace, err)
		}
	}
}

// CounterSum is the sum of counter name over the series of controller-runtime's registry whose labels
// include want (an in-process operator counts into that registry); 0 if there is none.
func CounterSum(t testing.TB, name string, want map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
					match++
				}
			}
			if match == len(want) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
