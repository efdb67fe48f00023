package helm_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

// The webhook configuration of config/webhook is installed pointing at this process: TestChartRBAC serves it
// with the operator running as the chart's ServiceAccount.
func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks()) }

// kubeVersion is the Kubernetes version helm template assumes (the local control plane's); without it the
// pinned helm assumes v1.20 and the chart's kubeVersion constraint fails.
const kubeVersion = "v1.37.2"

var (
	root      = testenv.RepoRoot()
	chartDir  = filepath.Join(root, "charts", "fencekit")
	toolsFile = filepath.Join(root, "hack", "tools", "go.mod")
)

// helmBinary builds (once per test package, through Go's build cache) the helm pinned in hack/tools/go.mod
// and returns its path: `go tool -n` builds the tool and prints where the executable is.
var helmBinary = sync.OnceValues(func() (string, error) {
	cmd := exec.Command("go", "tool", "-modfile="+toolsFile, "-n", "helm")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("building helm from %s: %w: %s", toolsFile, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
})

// helm runs the pinned helm and returns its stdout, or its stderr as the error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := helmBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.New(strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// templateRelease renders the chart as release in namespace ns; extra are further helm arguments (--set ...).
func templateRelease(t *testing.T, release, ns string, extra ...string) (string, error) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", ns, "--kube-version", kubeVersion}
	return helm(t, append(args, extra...)...)
}

// template renders the chart as release "fencekit" in namespace ns with the given --set values.
func template(t *testing.T, ns string, extra ...string) (string, error) {
	t.Helper()
	return templateRelease(t, "fencekit", ns, extra...)
}

// objects renders the chart and parses every object; extra are further helm arguments (--set ...).
func objects(t *testing.T, ns string, extra ...string) rendered {
	t.Helper()
	return releaseObjects(t, "fencekit", ns, extra...)
}

// releaseObjects is objects for a release of any name.
func releaseObjects(t *testing.T, release, ns string, extra ...string) rendered {
	t.Helper()
	out, err := templateRelease(t, release, ns, extra...)
	if err != nil {
		t.Fatalf("helm template %s in %s %v: %v", release, ns, extra, err)
	}
	return parse(t, out)
}

func parse(t *testing.T, manifests string) rendered {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objs rendered
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("parsing the rendered chart: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		objs = append(objs, u)
	}
}

// rendered is a rendered chart.
type rendered []*unstructured.Unstructured

// find returns the object of that kind and name, or nil.
func (r rendered) find(kind, name string) *unstructured.Unstructured {
	for _, u := range r {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// get returns the object of that kind and name, failing the test if it is missing.
func (r rendered) get(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	u := r.find(kind, name)
	if u == nil {
		t.Fatalf("the chart renders no %s %q; it renders %v", kind, name, r.names())
	}
	return u
}

// ofKind returns the objects of one kind.
func (r rendered) ofKind(kind string) rendered {
	var out rendered
	for _, u := range r {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

func (r rendered) names() []string {
	var out []string
	for _, u := range r {
		out = append(out, u.GetKind()+"/"+u.GetName())
	}
	return out
}
