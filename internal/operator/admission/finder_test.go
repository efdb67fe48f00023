package admission

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// podWithConditions is Pod ns/p whose status holds n conditions, the kubelet's managedFields entry owning
// each of them.
func podWithConditions(n int) *unstructured.Unstructured {
	conds := make([]any, n)
	owned := map[string]any{}
	for i := range conds {
		t := fmt.Sprintf("c%05d", i)
		conds[i] = map[string]any{"type": t, "status": "True"}
		owned[fmt.Sprintf(`k:{"type":%q}`, t)] = map[string]any{".": map[string]any{}, "f:status": map[string]any{}, "f:type": map[string]any{}}
	}
	kubelet := managedEntry("kubelet", "Update", map[string]any{"f:status": map[string]any{"f:conditions": owned}})
	kubelet["subresource"] = "status"
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"namespace": "ns", "name": "p", "managedFields": []any{kubelet}},
		"status":   map[string]any{"conditions": conds},
	}}
}

// BenchmarkOwnershipChangesOfManyConditions: the kubelet's status write of 2,550 conditions, each of
// which its entry gains (the write TestRound5KubeletPadsItsPodsStatus sends).
func BenchmarkOwnershipChangesOfManyConditions(b *testing.B) {
	old, updated := podWithConditions(0), podWithConditions(2550)
	free := func(p Path) bool { return p.under("status") }
	for b.Loop() {
		changes, err := ownershipChanges(old, updated, free, true)
		if err != nil || len(changes) != 0 {
			b.Fatalf("%v, %d changes", err, len(changes))
		}
	}
}

// In a list too long to search element by element, has finds every element by the path that names it (by
// key fields, string or numeric, whatever form the object's numbers were decoded to, or by value), and
// none that the list lacks, as a search of each element does.
func TestHasInLongLists(t *testing.T) {
	const n = 3 * shortList
	var conds, ports, finalizers, zeros []string
	for i := range n {
		conds = append(conds, fmt.Sprintf(`{"type":"c%d","status":"True"}`, i))
		ports = append(ports, fmt.Sprintf(`{"containerPort":%d,"protocol":"TCP"}`, 8000+i))
		finalizers = append(finalizers, fmt.Sprintf(`"example.com/f%d"`, i))
		zeros = append(zeros, fmt.Sprintf(`{"n":%d,"x":-0.0}`, i))
	}
	join := func(s []string) string { return "[" + strings.Join(s, ",") + "]" }
	doc := `{"metadata":{"finalizers":` + join(finalizers) + `},"spec":{"containers":[{"name":"c","ports":` + join(ports) +
		`}],"zeros":` + join(zeros) + `},"status":{"conditions":` + join(conds) + `}}`
	var paths []string
	for i := range n + 3 {
		paths = append(paths,
			fmt.Sprintf(`{"f:status":{"f:conditions":{"k:{\"type\":\"c%d\"}":{"f:status":{}}}}}`, i),
			fmt.Sprintf(`{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{"f:ports":{"k:{\"containerPort\":%d,\"protocol\":\"TCP\"}":{}}}}}}`, 8000+i),
			fmt.Sprintf(`{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{"f:ports":{"k:{\"containerPort\":%d,\"protocol\":\"UDP\"}":{}}}}}}`, 8000+i),
			fmt.Sprintf(`{"f:metadata":{"f:finalizers":{"v:\"example.com/f%d\"":{}}}}`, i),
			fmt.Sprintf(`{"f:spec":{"f:zeros":{"k:{\"n\":%d,\"x\":0}":{}}}}`, i),
			fmt.Sprintf(`{"f:spec":{"f:zeros":{"k:{\"n\":%d.0,\"x\":0.0}":{}}}}`, i),
		)
	}
	for _, obj := range attackDecode(t, `{"apiVersion":"v1","kind":"Pod",`+doc[1:]) {
		in, found := newFinder(obj), 0
		for _, fields := range paths {
			set := fieldpath.NewSet()
			if err := set.FromJSON(strings.NewReader(fields)); err != nil {
				t.Fatalf("%s: %v", fields, err)
			}
			set.Leaves().Iterate(func(p fieldpath.Path) {
				want := linearHas(obj, p)
				if got := in.has(p); got != want {
					t.Errorf("has(%s) = %v, a search of each element finds %v", p, got, want)
				}
				if want {
					found++
				}
			})
		}
		// Each condition, TCP port and finalizer, and each element of zeros twice (-0.0 equals 0 and 0.0).
		if want := 5 * n; found != want {
			t.Errorf("%d of the paths name a field of the object, want %d", found, want)
		}
	}
}
