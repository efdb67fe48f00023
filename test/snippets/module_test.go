package snippets

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// docs are the Markdown files whose Go blocks a user may copy (docs/design/*.md too).
var docs = []string{"README.md", "docs/*.md", "docs/design/*.md"}

// examples are copied into the module as they are.
var examples = []string{"examples/worker", "examples/controller"}

const consumerModule = "example.com/fencekit-consumer"

// snippet is one compiled block: the package it is built as.
type snippet struct {
	Block
	dir string // relative to the module
	err error  // the block cannot be made a Go file (a fragment without a marker)
}

// module is the temporary consumer module, built once for every test of the package.
type module struct {
	root, dir string
	snippets  []snippet
	excluded  []Block
	// failed maps a package directory of the module to the compiler's messages for it.
	failed map[string]string
	// buildErr is set when the build failed in a way that names no package.
	buildErr error
}

var (
	once  sync.Once
	built *module
	setup error
)

// consumer returns the temporary module with the snippets and examples built in it.
func consumer(t *testing.T) *module {
	t.Helper()
	once.Do(func() { built, setup = buildModule() })
	if setup != nil {
		t.Fatal(setup)
	}
	return built
}

func repoRoot() (string, error) { return filepath.Abs("../..") }

// goCmd runs the go command in dir with the environment of a user's module: modules resolved and go.mod
// updated as needed (GOFLAGS=-mod=mod), no workspace, the caller's GOPROXY and module cache.
func goCmd(dir string, args ...string) (stdout, stderr []byte, err error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "CGO_ENABLED=0")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.Bytes(), errOut.Bytes(), err
}

// newConsumer copies test/consumer (go.mod, go.sum, main.go) into a temporary directory outside the
// repository and points its replace directive at the checkout.
func newConsumer(root string) (string, error) {
	dir, err := os.MkdirTemp("", "fencekit-consumer-")
	if err != nil {
		return "", err
	}
	if err := copyDir(filepath.Join(root, "test/consumer"), dir); err != nil {
		return "", err
	}
	if _, out, err := goCmd(dir, "mod", "edit", "-replace=github.com/fencekit/fencekit="+root); err != nil {
		return "", fmt.Errorf("go mod edit: %w\n%s", err, out)
	}
	return dir, nil
}

// consumerFor is newConsumer of the checkout for t, removed when t ends.
func consumerFor(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := newConsumer(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func buildModule() (*module, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := newConsumer(root)
	if err != nil {
		return nil, err
	}
	m := &module{root: root, dir: dir, failed: map[string]string{}}
	var files []string
	for _, g := range docs {
		fs, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return nil, err
		}
		files = append(files, fs...)
	}
	sort.Strings(files)
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, path)
		blocks, err := Blocks(rel, string(src))
		if err != nil {
			return nil, err
		}
		for _, b := range blocks {
			if b.Lang != "go" {
				if b.Marker != nil && b.Marker.Shell == "" {
					return nil, fmt.Errorf("%s:%d: snippet marker before a %q block: only Go blocks are compiled", rel, b.Line, b.Lang)
				}
				continue
			}
			if b.Marker != nil && b.Marker.Shell != "" {
				return nil, fmt.Errorf("%s:%d: shell marker %q before a Go block", rel, b.Line, b.Marker.Shell)
			}
			if b.Marker != nil && b.Marker.Excluded != "" {
				m.excluded = append(m.excluded, b)
				continue
			}
			s := snippet{Block: b, dir: filepath.Join("snippets", packageDir(rel, b.Line))}
			code, err := Source(b, path)
			if err != nil {
				s.err = err
				m.snippets = append(m.snippets, s)
				continue
			}
			if err := os.MkdirAll(filepath.Join(dir, s.dir), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(dir, s.dir, "snippet.go"), []byte(code), 0o644); err != nil {
				return nil, err
			}
			m.snippets = append(m.snippets, s)
		}
	}
	for _, ex := range examples {
		if err := copyDir(filepath.Join(root, ex), filepath.Join(dir, ex)); err != nil {
			return nil, err
		}
	}
	// The snippets and examples may use what the main module uses: its checksums let the build resolve
	// them without the checksum database (test/consumer's own go.sum is checked on its own, consumer_test.go).
	if err := appendFile(filepath.Join(root, "go.sum"), filepath.Join(dir, "go.sum")); err != nil {
		return nil, err
	}
	// go list -export runs the compiler on every package, as go build does, without linking the binaries
	// (linking the examples would triple the time and finds nothing the compiler does not).
	_, out, err := goCmd(dir, "list", "-export", "-f", "{{.ImportPath}}", "./...")
	if err != nil {
		m.failed = byPackage(out)
		if len(m.failed) == 0 {
			m.buildErr = fmt.Errorf("compiling the consumer module in %s (go list -export ./...): %w\n%s", dir, err, out)
		}
	}
	return m, nil
}

// packageDir names a snippet's package directory after its file and line: readme_md_67.
func packageDir(file string, line int) string {
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(file, "_"))
	return fmt.Sprintf("%s_%d", name, line)
}

// byPackage splits go build's output at its "# import/path" headers, by package directory.
func byPackage(out []byte) map[string]string {
	res := map[string]string{}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		l := sc.Text()
		if p, ok := strings.CutPrefix(l, "# "); ok {
			cur = strings.TrimPrefix(strings.TrimPrefix(p, consumerModule), "/")
			if cur == "" {
				cur = "."
			}
			continue
		}
		if cur != "" {
			res[cur] += l + "\n"
		}
	}
	return res
}

func copyDir(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func appendFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(to, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
