package snippets

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// What a module that imports every public package of fencekit (test/consumer) inherits, measured on
// 2026-12-01: bounds, so that a change which adds to it fails here and says what it added.
const (
	// maxGraphModules bounds `go list -m all` of test/consumer, its own line included. The whole module
	// graph of fencekit is inherited, the operator's, the CLI's and the tests' requirements among them.
	maxGraphModules = 173
	// maxBuildModules bounds the modules whose packages a build of test/consumer compiles, its own and
	// fencekit's included.
	maxBuildModules = 61
)

// neverInGraph are modules that are not in test/consumer's module graph and must not come into it.
var neverInGraph = []string{
	"k8s.io/kubernetes",
	"k8s.io/kubectl",
	"k8s.io/kube-aggregator",
	"k8s.io/controller-manager",
	"k8s.io/metrics",
	"helm.sh/helm/v3",
	"github.com/docker/docker",
	"github.com/redis/go-redis/v9",
	"sigs.k8s.io/controller-tools",
	"honnef.co/go/tools",
}

// neverCompiled are modules in the graph whose packages a build of the public packages does not compile,
// and must not: the operator's, the CLI's and the tests' dependencies.
var neverCompiled = []string{
	"github.com/jackc/pgx/v5",
	"github.com/anishathalye/porcupine",
	"github.com/open-policy-agent/cert-controller",
	"k8s.io/apiserver",
	"k8s.io/component-base",
	"k8s.io/cli-runtime",
	"sigs.k8s.io/kustomize/api",
	"sigs.k8s.io/kustomize/kyaml",
	"github.com/onsi/ginkgo/v2",
	"github.com/onsi/gomega",
	"github.com/spf13/cobra",
	"github.com/google/cel-go",
	"go.etcd.io/etcd/client/v3",
	"google.golang.org/grpc",
}

// TestConsumerModule: test/consumer's go.mod and go.sum are complete for its imports (as a user's module
// must be), and what it inherits stays within the bounds above.
func TestConsumerModule(t *testing.T) {
	dir := consumerFor(t)
	outdated := "test/consumer's go.mod or go.sum is out of date for fencekit's current requirements: run `cd test/consumer && go mod tidy`"

	out, stderr, err := goCmd(dir, "list", "-mod=readonly", "-m", "-f", "{{.Path}}", "all")
	if err != nil {
		t.Fatalf("%s\ngo list -m all: %v\n%s", outdated, err, stderr)
	}
	graph := lines(out)
	t.Logf("go list -m all: %d modules", len(graph))
	if len(graph) > maxGraphModules {
		t.Errorf("test/consumer inherits %d modules (go list -m all), more than the bound %d: a requirement was added to fencekit's go.mod, "+
			"and every module that imports fencekit inherits it; raise maxGraphModules only if that is meant", len(graph), maxGraphModules)
	}
	for _, m := range neverInGraph {
		if graph[m] {
			t.Errorf("%s is in test/consumer's module graph (go list -m all): a module that imports fencekit must not inherit it", m)
		}
	}

	out, stderr, err = goCmd(dir, "list", "-mod=readonly", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".")
	if err != nil {
		t.Fatalf("%s\ngo list -deps: %v\n%s", outdated, err, stderr)
	}
	built := lines(out)
	t.Logf("a build of the public packages compiles packages of %d modules", len(built))
	if len(built) > maxBuildModules {
		t.Errorf("a build of fencekit's public packages compiles packages of %d modules, more than the bound %d:\n%s",
			len(built), maxBuildModules, strings.Join(slices.Sorted(maps.Keys(built)), "\n"))
	}
	for _, m := range neverCompiled {
		if built[m] {
			t.Errorf("a build of fencekit's public packages compiles packages of %s: they must not reach it", m)
		}
	}
}

func lines(b []byte) map[string]bool {
	set := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			set[l] = true
		}
	}
	return set
}
