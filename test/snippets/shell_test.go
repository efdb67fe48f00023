package snippets

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// shellDocs are the Markdown files whose shell blocks a user types: the Go docs and the chart's README.
var shellDocs = append(slices.Clone(docs), "charts/fencekit/README.md")

// shellLangs are the info strings of shell blocks.
var shellLangs = []string{"sh", "bash", "shell", "console"}

// TestShellBlocks: every shell block of the documentation says how it is checked, and those that need no
// cluster run as written: a block marked "runs in the clone" in a copy of this checkout (the files git
// knows, as a fresh clone has them), one marked "runs in your module" in a new Go module beside that copy
// (../fencekit, as the README lays it out), each with bash -e, `helm` being the Helm that `make helm-test`
// uses (hack/tools) and `go install` installing into a directory on the PATH. A block that needs a
// cluster with fencekit installed is marked so, and any other says why it is not run.
func TestShellBlocks(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var run, skipped []Block
	for _, g := range shellDocs {
		files, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, path)
			blocks, err := Blocks(rel, string(src))
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range blocks {
				if !slices.Contains(shellLangs, b.Lang) {
					continue
				}
				switch {
				case b.Marker == nil || b.Marker.Shell == "":
					t.Errorf("%s:%d: a %s block without a shell marker: put one of <!-- snippet: %s -->, <!-- snippet: %s -->, "+
						"<!-- snippet: %s --> or <!-- snippet: %s REASON --> right before it", b.File, b.Line, b.Lang,
						ShellInClone, ShellInModule, ShellNeedsCluster, ShellNotRun)
				case b.Marker.Shell == ShellInClone || b.Marker.Shell == ShellInModule:
					run = append(run, b)
				default:
					skipped = append(skipped, b)
				}
			}
		}
	}
	if len(run) < 3 {
		t.Fatalf("only %d shell blocks are run, want the README's and the docs' (at least 3)", len(run))
	}

	tmp := t.TempDir()
	clone := filepath.Join(tmp, "fencekit")
	if err := copyCheckout(root, clone); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	helm := fmt.Sprintf("#!/bin/sh\nexec go tool -modfile=%s helm \"$@\"\n", filepath.Join(root, "hack/tools/go.mod"))
	if err := os.WriteFile(filepath.Join(bin, "helm"), []byte(helm), 0o755); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOBIN="+bin, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "GOWORK=off", "GOFLAGS=")

	for _, b := range run {
		t.Run(fmt.Sprintf("%s:%d", b.File, b.Line), func(t *testing.T) {
			dir := clone
			if b.Marker.Shell == ShellInModule {
				dir = filepath.Join(tmp, fmt.Sprintf("app-%s-%d", strings.NewReplacer("/", "-", ".", "-").Replace(b.File), b.Line))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if out, err := shell(t.Context(), dir, env, "go mod init example.com/app"); err != nil {
					t.Fatalf("go mod init: %v\n%s", err, out)
				}
			}
			out, err := shell(t.Context(), dir, env, b.Code)
			if err != nil {
				t.Fatalf("%s:%d: the block fails when run %s: %v\n--- block\n%s--- output\n%s", b.File, b.Line, b.Marker.Shell, err, b.Code, out)
			}
			t.Logf("%s:%d ran (%s):\n%s", b.File, b.Line, b.Marker.Shell, lastLines(out, 5))
		})
	}
	for _, b := range skipped {
		t.Logf("%s:%d: not run: %s", b.File, b.Line, cmpOr(b.Marker.NotRun, b.Marker.Shell))
	}
	t.Logf("%d shell blocks run, %d not run (with their reasons)", len(run), len(skipped))
}

// shell runs code with bash -e in dir, and returns its combined output.
func shell(ctx context.Context, dir string, env []string, code string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", code)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// copyCheckout copies the files git knows in root (tracked, and untracked but not ignored) into dir, with
// their modes: what a clone of the checkout holds.
func copyCheckout(root, dir string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files in %s: %w", root, err)
	}
	for _, rel := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		from := filepath.Join(root, rel)
		info, err := os.Lstat(from)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		if err != nil {
			return err
		}
		to := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(from)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, b, info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
