package snippets

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built != nil {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// TestDocSnippetsBuild: every Go block of the documentation builds in a module of its own that requires
// fencekit, or says why it is not compiled.
func TestDocSnippetsBuild(t *testing.T) {
	m := consumer(t)
	if m.buildErr != nil {
		t.Fatal(m.buildErr)
	}
	if len(m.snippets) == 0 {
		t.Fatalf("no Go block found in %v", docs)
	}
	for _, s := range m.snippets {
		t.Run(fmt.Sprintf("%s:%d", s.File, s.Line), func(t *testing.T) {
			if s.err != nil {
				t.Fatal(s.err)
			}
			if out, ok := m.failed[s.dir]; ok {
				t.Errorf("%s:%d: the Go block does not build when copied into a module that requires fencekit:\n%s",
					s.File, s.Line, strings.ReplaceAll(out, m.root+"/", ""))
			}
		})
	}
	for _, b := range m.excluded {
		t.Logf("%s:%d: not compiled: %s", b.File, b.Line, b.Marker.Excluded)
	}
	t.Logf("%d Go blocks compiled, %d not compiled (with their reasons)", len(m.snippets), len(m.excluded))
}

// TestExamplesBuildWhenCopied: examples/worker and examples/controller, copied as they are into another
// module, build: they import nothing a user's module cannot.
func TestExamplesBuildWhenCopied(t *testing.T) {
	m := consumer(t)
	if m.buildErr != nil {
		t.Fatal(m.buildErr)
	}
	for _, ex := range examples {
		if out, ok := m.failed[ex]; ok {
			t.Errorf("%s does not build when copied into a module that requires fencekit:\n%s", ex, out)
		}
	}
	if out, ok := m.failed["."]; ok {
		t.Errorf("test/consumer's main.go does not build:\n%s", out)
	}
}
