package attack

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fixedRoutes are routes as discovery lists them, for the generator's own tests.
var fixedRoutes = []route{
	{gvr: schema.GroupVersionResource{Version: "v1", Resource: "bindings"}, kind: "Binding", topLevel: true,
		parent: schema.GroupResource{Resource: "pods"}, parentKind: "Pod", verbs: []string{"create"}},
	{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap",
		parent: schema.GroupResource{Resource: "configmaps"}, parentKind: "ConfigMap", verbs: []string{"create", "delete", "deletecollection", "patch", "update"}},
	{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, sub: "binding", kind: "Binding",
		parent: schema.GroupResource{Resource: "pods"}, parentKind: "Pod", verbs: []string{"create"}},
	{gvr: schema.GroupVersionResource{Group: "fencing.fencekit.io", Version: "v1alpha1", Resource: "fencedresources"}, kind: "FencedResource",
		parent: schema.GroupResource{Group: "fencing.fencekit.io", Resource: "fencedresources"}, parentKind: "FencedResource", verbs: []string{"create", "patch", "update", "delete"}},
}

// TestGeneratorReplays: a seed generates the same steps every time (what -attack.seed promises), another
// seed others, and the first random writes take every route.
func TestGeneratorReplays(t *testing.T) {
	steps := func(seed uint64) []string {
		g := newGenerator(seed, fixedRoutes)
		var out []string
		for range 300 {
			out = append(out, g.next().String())
		}
		return out
	}
	a, b, c := steps(42), steps(42), steps(43)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("the same seed generated different steps")
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("two seeds generated the same steps")
	}
	g := newGenerator(42, fixedRoutes)
	seen := map[string]bool{}
	for range fixedRoutes {
		seen[g.write().route.String()] = true
	}
	if len(seen) != len(fixedRoutes) {
		t.Errorf("the first %d random writes took routes %v, want each of the %d once", len(fixedRoutes), seen, len(fixedRoutes))
	}
}
