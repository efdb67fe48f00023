package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const mod = "example.com/m"

// graphOf builds a graph from "importer: imported imported..." lines of module-relative IDs; a test
// variant is written "pkg/a [pkg/a.test]" and expanded to full IDs.
func graphOf(lines ...string) *graph {
	full := func(id string) string {
		if strings.HasPrefix(id, "std/") {
			return strings.TrimPrefix(id, "std/")
		}
		id = mod + "/" + id
		return strings.Replace(id, "[", "["+mod+"/", 1)
	}
	g := &graph{module: mod, pkgs: map[string]*pkg{}}
	for _, l := range lines {
		from, to, _ := strings.Cut(l, ":")
		p := &pkg{ImportPath: full(strings.TrimSpace(from))}
		if i := strings.Index(p.ImportPath, " ["); i > 0 {
			p.ForTest = strings.TrimSuffix(strings.TrimSuffix(p.ImportPath[i+2:], "]"), ".test")
		}
		for _, imp := range strings.Split(to, ",") {
			if imp = strings.TrimSpace(imp); imp != "" {
				p.Imports = append(p.Imports, full(imp))
			}
		}
		g.pkgs[p.ImportPath] = p
	}
	return g
}

func TestCheck(t *testing.T) {
	rules := []rule{
		{Subjects: []string{"pkg/..."}, May: []string{"pkg/..."}, Why: "library"},
		{Subjects: []string{"pkg/..."}, Tests: true, May: []string{"pkg/...", "test/util/testenv"}, Why: "library tests"},
		{Subjects: []string{"pkg/e"}, May: []string{"pkg/..."}, Never: []string{"sigs.k8s.io/controller-runtime/..."}, Why: "generic"},
	}
	cases := map[string]struct {
		graph *graph
		want  []string
	}{
		"the library's test reaches the operator through the test helper": {
			graph: graphOf(
				"pkg/a: std/fmt",
				"pkg/a_test [pkg/a.test]: pkg/a [pkg/a.test], test/util/testenv [pkg/a.test]",
				"pkg/a [pkg/a.test]: std/fmt",
				"test/util/testenv [pkg/a.test]: pkg/a [pkg/a.test], internal/operator",
				"internal/operator: internal/operator/webhook",
				"internal/operator/webhook:",
			),
			want: []string{"the test build of pkg/a reaches internal/operator: pkg/a_test (test) -> test/util/testenv (test) -> internal/operator"},
		},
		"the library reaches internal/": {
			graph: graphOf("pkg/a: pkg/b", "pkg/b: internal/x", "internal/x:"),
			want: []string{
				"the build of pkg/a reaches internal/x: pkg/a -> pkg/b -> internal/x",
				"the build of pkg/b reaches internal/x: pkg/b -> internal/x",
			},
		},
		"the library's test uses only the control plane": {
			graph: graphOf(
				"pkg/a:",
				"pkg/a_test [pkg/a.test]: pkg/a, test/util/testenv",
				"test/util/testenv: pkg/a, std/k8s.io/client-go",
			),
		},
		"the elector reaches controller-runtime through another module": {
			graph: graphOf("pkg/e: std/k8s.io/client-go", "std/k8s.io/client-go: std/sigs.k8s.io/controller-runtime/pkg/metrics",
				"std/sigs.k8s.io/controller-runtime/pkg/metrics:"),
			want: []string{"the build of pkg/e reaches sigs.k8s.io/controller-runtime/pkg/metrics: pkg/e -> k8s.io/client-go -> sigs.k8s.io/controller-runtime/pkg/metrics"},
		},
		"the elector reaches client-go only": {
			graph: graphOf("pkg/e: std/k8s.io/client-go", "std/k8s.io/client-go: std/fmt", "std/fmt:"),
		},
		"the operator may import the library": {
			graph: graphOf("internal/operator: pkg/a", "pkg/a:"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, b := range check(tc.graph, rules) {
				line, _, _ := strings.Cut(strings.TrimPrefix(b, "import rule broken: "), "\n")
				got = append(got, line)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("breaches (-want +got):\n%s", diff)
			}
		})
	}
}
