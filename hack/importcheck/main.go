package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

func main() {
	g, err := load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "importcheck: %v\n", err)
		os.Exit(2)
	}
	breaches := check(g, rules)
	for _, b := range breaches {
		fmt.Fprintln(os.Stderr, b)
	}
	if len(breaches) > 0 {
		fmt.Fprintf(os.Stderr, "importcheck: %d import rule(s) broken (docs/design/imports.md)\n", len(breaches))
		os.Exit(1)
	}
}

// pkg is one package of go list -test -deps: a plain package, a test variant ("p [p.test]"), an external
// test package ("p_test [p.test]") or a test main ("p.test").
type pkg struct {
	ImportPath string
	ForTest    string
	Imports    []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// graph is the module's packages and everything they import, test builds included.
type graph struct {
	module string
	pkgs   map[string]*pkg
}

// load lists every package of the module with its dependencies and test dependencies.
func load() (*graph, error) {
	out, err := goList("list", "-m")
	if err != nil {
		return nil, err
	}
	module := strings.TrimSpace(string(out))
	out, err = goList("list", "-e", "-test", "-deps", "-json=ImportPath,ForTest,Imports,Module,Error", "./...")
	if err != nil {
		return nil, err
	}
	g := &graph{module: module, pkgs: map[string]*pkg{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading go list's output: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("package %s: %s", p.ImportPath, p.Error.Err)
		}
		g.pkgs[p.ImportPath] = &p
	}
	return g, nil
}

func goList(args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// rel is path relative to the module ("pkg/elector"), with a test variant's suffix and an external test's
// "_test" removed; ok is false for packages outside the module and for test mains.
func (g *graph) rel(id string) (string, bool) {
	path, _, _ := strings.Cut(id, " ")
	if strings.HasSuffix(path, ".test") {
		return "", false
	}
	path = strings.TrimSuffix(path, "_test")
	if path == g.module {
		return ".", true
	}
	r, ok := strings.CutPrefix(path, g.module+"/")
	return r, ok
}

// matches reports whether the module-relative path p matches pattern ("a/b" or "a/...").
func matches(p, pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == prefix || strings.HasPrefix(p, prefix+"/")
	}
	return p == pattern
}

func matchesAny(p string, patterns []string) bool {
	for _, pat := range patterns {
		if matches(p, pat) {
			return true
		}
	}
	return false
}

// check returns one message per package a rule's subject reaches and may not, naming the chain of imports
// from the subject (or its test build) to it. Only the first refused package on a chain is named: what it
// pulls in after it is its own breach.
func check(g *graph, rules []rule) []string {
	ids := make([]string, 0, len(g.pkgs))
	for id := range g.pkgs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []string
	for _, r := range rules {
		for _, id := range ids {
			p := g.pkgs[id]
			root, ok := g.rel(id)
			if !ok || !matchesAny(root, r.Subjects) {
				continue
			}
			isTest := p.ForTest != "" || strings.Contains(id, " [")
			if isTest != r.Tests {
				continue
			}
			build := "build"
			if isTest {
				build = "test build"
			}
			for _, chain := range g.refused(id, r.May, r.Never) {
				out = append(out, fmt.Sprintf("import rule broken: the %s of %s reaches %s: %s\n  rule: %s may reach only %s: %s",
					build, root, g.short(chain[len(chain)-1]), g.chain(chain),
					strings.Join(r.Subjects, ", "), limits(r), r.Why))
			}
		}
	}
	return out
}

// limits says what a rule lets its subjects reach.
func limits(r rule) string {
	s := strings.Join(r.May, ", ")
	if len(r.Never) > 0 {
		s += " and never " + strings.Join(r.Never, ", ")
	}
	return s
}

// refused walks the imports from id breadth first, without going past a refused package, and returns the
// shortest chain to each refused package it reaches: a package of the module not in may, or, when never is
// set, a package outside the module matching never (then the walk goes through other modules too).
func (g *graph) refused(id string, may, never []string) [][]string {
	parent := map[string]string{id: ""}
	queue := []string{id}
	var found [][]string
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		p, ok := g.pkgs[cur]
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := parent[imp]; seen {
				continue
			}
			parent[imp] = cur
			r, inModule := g.rel(imp)
			if !inModule {
				if len(never) == 0 {
					continue // outside the module: not checked, and it cannot import the module back
				}
				path, _, _ := strings.Cut(imp, " ")
				if !matchesAny(path, never) {
					queue = append(queue, imp)
					continue
				}
			}
			if !inModule || !matchesAny(r, may) {
				var chain []string
				for at := imp; at != ""; at = parent[at] {
					chain = append([]string{at}, chain...)
				}
				found = append(found, chain)
				continue
			}
			queue = append(queue, imp)
		}
	}
	return found
}

// short is id relative to the module, with its test variant shown as "(test)".
func (g *graph) short(id string) string {
	path, variant, _ := strings.Cut(id, " ")
	r, ok := strings.CutPrefix(path, g.module+"/")
	if !ok {
		r = path
	}
	if variant != "" {
		r += " (test)"
	}
	return r
}

func (g *graph) chain(ids []string) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = g.short(id)
	}
	return strings.Join(parts, " -> ")
}
