// Command binarycheck fails when a binary fencekit ships links test code: Go's testing package, envtest,
// fencekit's control-plane and fixture packages for tests, or (for the fencekit CLI, which users copy into
// their images) the demo, the development cluster and the operator. For each forbidden package it prints
// the import chain from the binary's main package, so that the import to cut is plain.
//
// Run it from the repository root: go run ./hack/binarycheck (make check-binaries, part of make verify).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
)

const module = "github.com/fencekit/fencekit"

// testCode are packages no shipped binary may link.
var testCode = []string{
	"testing",
	"sigs.k8s.io/controller-runtime/pkg/envtest",
}

// binaries are the shipped binaries and what each must not link besides testCode. Packages under the
// module's test/ (test/util holds the test helpers: testenv, pgtest, operatortest) are forbidden to all of them.
var binaries = []struct {
	main      string
	forbidden []string
}{
	{"./cmd/fencekit", []string{module + "/internal/dev/...", module + "/internal/operator/..."}},
	{"./cmd/manager", nil},
	{"./cmd/kubectl-fencekit", []string{module + "/internal/dev/..."}},
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func main() {
	var breaches []string
	for _, b := range binaries {
		found, err := check(b.main, append(append([]string{}, testCode...), b.forbidden...))
		if err != nil {
			fmt.Fprintf(os.Stderr, "binarycheck: %v\n", err)
			os.Exit(2)
		}
		breaches = append(breaches, found...)
	}
	for _, b := range breaches {
		fmt.Fprintln(os.Stderr, b)
	}
	if len(breaches) > 0 {
		fmt.Fprintf(os.Stderr, "binarycheck: %d forbidden package(s) linked into shipped binaries\n", len(breaches))
		os.Exit(1)
	}
}

// check lists main's dependencies and returns one line per forbidden package it links, with the chain.
func check(main string, forbidden []string) ([]string, error) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports", main).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("go list -deps %s: %v\n%s", main, err, ee.Stderr)
		}
		return nil, fmt.Errorf("go list -deps %s: %w", main, err)
	}
	imports := map[string][]string{}
	var root string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list -deps %s: %w", main, err)
		}
		imports[p.ImportPath] = p.Imports
		root = p.ImportPath // go list -deps lists the main package last
	}
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, m := range imports[n] {
			if _, seen := prev[m]; !seen {
				prev[m] = n
				queue = append(queue, m)
			}
		}
	}
	var breaches []string
	for p := range prev {
		if !isForbidden(p, forbidden) {
			continue
		}
		chain := []string{p}
		for n := prev[p]; n != ""; n = prev[n] {
			chain = append([]string{n}, chain...)
		}
		breaches = append(breaches, fmt.Sprintf("%s links %s: %s", main, p, strings.Join(chain, " -> ")))
	}
	sort.Strings(breaches)
	return breaches, nil
}

func isForbidden(p string, forbidden []string) bool {
	if strings.HasPrefix(p, module+"/test/") {
		return true
	}
	for _, f := range forbidden {
		if prefix, ok := strings.CutSuffix(f, "/..."); ok && (p == prefix || strings.HasPrefix(p, prefix+"/")) {
			return true
		}
		if p == f {
			return true
		}
	}
	return false
}
