// Package yaml applies every YAML of examples/, docs/ and the READMEs (files, and Markdown code blocks marked yaml) to
// the local control plane, so that an example a user copies is one the apiserver accepts.
package yaml

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

// snippet is YAML from file, starting at line.
type snippet struct {
	file string
	line int
	text string
}

// snippets are the YAML files under dirs and the ```yaml blocks of their Markdown files.
func snippets(t *testing.T, dirs ...string) []snippet {
	t.Helper()
	var out []snippet
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(testenv.RepoRoot(), dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(testenv.RepoRoot(), path)
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			switch filepath.Ext(path) {
			case ".yaml", ".yml":
				out = append(out, snippet{file: rel, line: 1, text: string(b)})
			case ".md":
				out = append(out, markdownBlocks(rel, b)...)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func markdownBlocks(file string, b []byte) []snippet {
	var out []snippet
	sc := bufio.NewScanner(bytes.NewReader(b))
	var cur *snippet
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && (trimmed == "```yaml" || trimmed == "```yml"):
			cur = &snippet{file: file, line: n + 1}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	return out
}

// TestDocumentedYAMLIsAccepted applies every object of every snippet with a server-side dry run (nothing
// is stored; objects that need others, a Lease or a namespace, are still checked against the CRD's schema,
// its CEL rules and fencekit's webhooks) into a fresh namespace when it names none. A snippet that is not
// an object (a fragment of a Pod spec, Helm values) must still parse. A refusal names the file and line.
func TestDocumentedYAMLIsAccepted(t *testing.T) {
	operatortest.Start(t, env) // fencekit's webhooks check FencingPolicies and FencedResources too
	ns := env.Namespace(t)
	for _, s := range snippets(t, "examples", "docs", "README.md", "charts/fencekit/README.md") {
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(s.text), 4096)
		for i := 0; ; i++ {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				t.Errorf("%s:%d: document %d does not parse: %v", s.file, s.line, i, err)
				break
			}
			if u.GetAPIVersion() == "" || u.GetKind() == "" {
				t.Logf("%s:%d: document %d is a fragment (no apiVersion and kind): parsed, not applied", s.file, s.line, i)
				continue
			}
			if u.GetNamespace() != "" {
				u.SetNamespace(ns) // the documented namespace need not exist here
			}
			if namespaced, err := env.Client.IsObjectNamespaced(&u); err == nil && namespaced {
				u.SetNamespace(ns)
			}
			err := env.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(&u), client.FieldOwner("fencekit-yaml-test"), client.ForceOwnership, client.DryRunAll)
			if err != nil {
				t.Errorf("%s:%d: %s %s (document %d) is refused: %v", s.file, s.line, u.GetKind(), u.GetName(), i, err)
				continue
			}
			t.Logf("%s:%d: %s %s accepted (dry run)", s.file, s.line, u.GetKind(), u.GetName())
		}
	}
}
