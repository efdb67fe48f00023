package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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
			if diff := cmp.Diff(tc.want, breaches(tc.graph, rules)); diff != "" {
				t.Errorf("breaches (-want +got):\n%s", diff)
			}
		})
	}
}

// TestShippedBinaries runs the project's own rules on graphs in which a shipped binary links what it must
// not: Go's testing package through another module, envtest, a test helper, the operator, the demo.
func TestShippedBinaries(t *testing.T) {
	cases := map[string]struct {
		graph *graph
		want  []string
	}{
		"the CLI reaches testing through another module": {
			graph: graphOf("cmd/fencekit: internal/cli/leadrun", "internal/cli/leadrun: std/example.org/x",
				"std/example.org/x: std/testing", "std/testing:"),
			want: []string{"the build of cmd/fencekit reaches testing: cmd/fencekit -> internal/cli/leadrun -> example.org/x -> testing"},
		},
		"the operator's binary reaches envtest": {
			graph: graphOf("cmd/manager: internal/operator", "internal/operator: std/sigs.k8s.io/controller-runtime/pkg/envtest",
				"std/sigs.k8s.io/controller-runtime/pkg/envtest:"),
			want: []string{"the build of cmd/manager reaches sigs.k8s.io/controller-runtime/pkg/envtest: cmd/manager -> internal/operator -> sigs.k8s.io/controller-runtime/pkg/envtest"},
		},
		"the CLI reaches the operator and the demo": {
			graph: graphOf("cmd/fencekit: internal/operator/webhook, internal/dev/demo", "internal/operator/webhook:", "internal/dev/demo:"),
			want: []string{
				"the build of cmd/fencekit reaches internal/operator/webhook: cmd/fencekit -> internal/operator/webhook",
				"the build of cmd/fencekit reaches internal/dev/demo: cmd/fencekit -> internal/dev/demo",
			},
		},
		"the kubectl plugin reaches a test helper": {
			graph: graphOf("cmd/kubectl-fencekit: internal/cli/plugin", "internal/cli/plugin: test/util/testenv", "test/util/testenv:"),
			want: []string{
				"the build of internal/cli/plugin reaches test/util/testenv: internal/cli/plugin -> test/util/testenv",
				// once for the rule of cmd/... and internal/..., once for the plugin's own
				"the build of cmd/kubectl-fencekit reaches test/util/testenv: cmd/kubectl-fencekit -> internal/cli/plugin -> test/util/testenv",
				"the build of cmd/kubectl-fencekit reaches test/util/testenv: cmd/kubectl-fencekit -> internal/cli/plugin -> test/util/testenv",
			},
		},
		"the shipped binaries link what they may": {
			graph: graphOf("cmd/fencekit: internal/cli/leadrun, internal/procfs", "internal/cli/leadrun: pkg/elector, std/fmt",
				"internal/procfs:", "pkg/elector:", "std/fmt:",
				"cmd/manager: internal/operator", "internal/operator: internal/operator/webhook, internal/version",
				"internal/operator/webhook: api/v1alpha1", "internal/version:", "api/v1alpha1:"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, breaches(tc.graph, rules), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("breaches (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTestsByTier runs the project's own rules on test builds: a test beside its code reaches nothing under
// test/ but test/util/httpfencetest (which reaches nothing else of test/), and a test under test/ that
// needs the operator reaches it through test/util/operatortest.
func TestTestsByTier(t *testing.T) {
	cases := map[string]struct {
		graph *graph
		want  []string
	}{
		"the reconcilers' test beside them starts the operator": {
			graph: graphOf(
				"controllers:",
				"controllers_test [controllers.test]: controllers, test/util/operatortest",
				"test/util/operatortest: internal/operator",
				"internal/operator:",
			),
			want: []string{"the test build of controllers reaches test/util/operatortest: controllers_test (test) -> test/util/operatortest"},
		},
		"a tool's test starts a control plane": {
			graph: graphOf("hack/x:", "hack/x_test [hack/x.test]: hack/x, test/util/testenv", "test/util/testenv:"),
			want:  []string{"the test build of hack/x reaches test/util/testenv: hack/x_test (test) -> test/util/testenv"},
		},
		"httpfence's test reaches PostgreSQL through its shared helper": {
			graph: graphOf(
				"pkg/fencing/httpfence:",
				"pkg/fencing/httpfence_test [pkg/fencing/httpfence.test]: pkg/fencing/httpfence, test/util/httpfencetest",
				"test/util/httpfencetest: pkg/fencing/httpfence, test/util/pgtest",
				"test/util/pgtest:",
			),
			want: []string{"the test build of pkg/fencing/httpfence reaches test/util/pgtest: pkg/fencing/httpfence_test (test) -> test/util/httpfencetest -> test/util/pgtest"},
		},
		"the tests that need a control plane or the operator live under test/": {
			graph: graphOf(
				"controllers: internal/operator/admission", "internal/operator/admission:",
				"controllers [controllers.test]: internal/operator/admission",
				"test/controllers_test [test/controllers.test]: controllers, test/util/operatortest, test/util/testenv",
				"test/util/operatortest: internal/operator, test/util/testenv", "internal/operator: controllers",
				"test/util/testenv: api/v1alpha1", "api/v1alpha1:",
				"test/integration/api_test [test/integration/api.test]: api/v1alpha1, test/util/testenv",
				"pkg/fencing/httpfence:",
				"pkg/fencing/httpfence_test [pkg/fencing/httpfence.test]: pkg/fencing/httpfence, test/util/httpfencetest",
				"test/util/httpfencetest: pkg/fencing/httpfence",
			),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, breaches(tc.graph, rules), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
				t.Errorf("breaches (-want +got):\n%s", diff)
			}
		})
	}
}

// breaches is the first line of each breach check reports, without its prefix.
func breaches(g *graph, rules []rule) []string {
	var got []string
	for _, b := range check(g, rules) {
		line, _, _ := strings.Cut(strings.TrimPrefix(b, "import rule broken: "), "\n")
		got = append(got, line)
	}
	return got
}
