package snippets

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"strings"
)

// imports are the packages a fragment or its frame may use without importing them, by the name they are
// used under: the names fencekit's documentation uses.
var imports = map[string]string{
	"context":         "context",
	"errors":          "errors",
	"fmt":             "fmt",
	"http":            "net/http",
	"log":             "log",
	"os":              "os",
	"sql":             "database/sql",
	"strings":         "strings",
	"sync":            "sync",
	"time":            "time",
	"apierrors":       "k8s.io/apimachinery/pkg/api/errors",
	"metav1":          "k8s.io/apimachinery/pkg/apis/meta/v1",
	"runtime":         "k8s.io/apimachinery/pkg/runtime",
	"types":           "k8s.io/apimachinery/pkg/types",
	"wait":            "k8s.io/apimachinery/pkg/util/wait",
	"corev1":          "k8s.io/api/core/v1",
	"kubernetes":      "k8s.io/client-go/kubernetes",
	"rest":            "k8s.io/client-go/rest",
	"clientgoscheme":  "k8s.io/client-go/kubernetes/scheme",
	"ctrl":            "sigs.k8s.io/controller-runtime",
	"client":          "sigs.k8s.io/controller-runtime/pkg/client",
	"fencingv1alpha1": "github.com/fencekit/fencekit/api/v1alpha1",
	"elector":         "github.com/fencekit/fencekit/pkg/elector",
	"managed":         "github.com/fencekit/fencekit/pkg/managed",
	"fencing":         "github.com/fencekit/fencekit/pkg/fencing",
	"httpfence":       "github.com/fencekit/fencekit/pkg/fencing/httpfence",
	"sqlfence":        "github.com/fencekit/fencekit/pkg/fencing/sqlfence",
}

// IsWholeFile reports whether code is a Go file of its own: a package clause before any declaration.
func IsWholeFile(code string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", code, parser.PackageClauseOnly)
	return err == nil && f.Name != nil
}

// Source returns the Go file that compiles block b: a whole file as it is, a fragment in its marker's
// frame with the imports it uses. Every line carries a //line directive to the Markdown file (named
// path), so that the compiler's messages name the Markdown line. The package is main if the file
// declares func main, and snippet otherwise.
func Source(b Block, path string) (string, error) {
	if IsWholeFile(b.Code) {
		return fmt.Sprintf("//line %s:%d:1\n%s", path, b.Line+1, b.Code), nil
	}
	if b.Marker == nil || b.Marker.Frame == "" {
		return "", fmt.Errorf("%s:%d: a Go block that is not a whole file needs a marker before it: "+
			"<!-- snippet: %s ... --> with its frame, or <!-- snippet: %s REASON -->", b.File, b.Line, fragment, excluded)
	}
	var body strings.Builder
	for i, l := range strings.Split(strings.TrimSuffix(b.Marker.Frame, "\n"), "\n") {
		if strings.TrimSpace(l) == placeholder {
			fmt.Fprintf(&body, "//line %s:%d:1\n%s", path, b.Line+1, b.Code)
			fmt.Fprintf(&body, "//line %s:%d:1\n", path, b.Marker.FrameLine+i+1)
			continue
		}
		if i == 0 {
			fmt.Fprintf(&body, "//line %s:%d:1\n", path, b.Marker.FrameLine)
		}
		body.WriteString(l + "\n")
	}
	pkg := "snippet"
	f, err := parser.ParseFile(token.NewFileSet(), "", "package snippet\n"+body.String(), parser.SkipObjectResolution)
	if err != nil {
		// Left to the compiler, which says the same with the Markdown line.
		return "package snippet\n" + body.String(), nil //nolint:nilerr // the compiler reports it, with the Markdown line
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "main" {
			pkg = "main"
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "package %s\n\n", pkg)
	if names := usedImports(f); len(names) > 0 {
		out.WriteString("import (\n")
		for _, n := range names {
			fmt.Fprintf(&out, "\t%s %q\n", n, imports[n])
		}
		out.WriteString(")\n\n")
	}
	out.WriteString(body.String())
	return out.String(), nil
}

// usedImports returns the names of the imports table that f uses as a package (name.X) and does not
// declare itself, sorted.
func usedImports(f *ast.File) []string {
	declared := map[string]bool{}
	used := map[string]bool{}
	declare := func(ids ...*ast.Ident) {
		for _, id := range ids {
			if id != nil {
				declared[id.Name] = true
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						declare(id)
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						declare(id)
					}
				}
			}
		case *ast.ValueSpec:
			declare(n.Names...)
		case *ast.Field:
			declare(n.Names...)
		case *ast.FuncDecl:
			declare(n.Name)
		case *ast.TypeSpec:
			declare(n.Name)
		}
		return true
	})
	var names []string
	for n := range used {
		if _, ok := imports[n]; ok && !declared[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
