package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var chartDir = filepath.Join("..", "..", "charts", "fencekit")

// TestReadmeUpToDate fails when charts/fencekit/README.md is not what `make chart` generates from values.yaml
// (which also fails if a value has no comment).
func TestReadmeUpToDate(t *testing.T) {
	want, err := render(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatalf("%v: run make chart", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("charts/fencekit/README.md is out of date: run make chart (-want +got):\n%s", diff)
	}
}

func TestUndocumentedValueFails(t *testing.T) {
	dir := t.TempDir()
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Chart.yaml"), chart, 0o644); err != nil {
		t.Fatal(err)
	}
	values := "# -- Documented.\na: 1\nsub:\n  # -- Documented too.\n  b: true\n  c: x\n"
	if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = render(dir)
	if err == nil || !strings.Contains(err.Error(), "values.yaml:6: sub.c has no `# --` comment") {
		t.Errorf("render = %v, want the undocumented key sub named with its line", err)
	}
}

func TestRows(t *testing.T) {
	n := "# -- Replicas.\n# Two lines.\nreplicas: 2\nimage:\n  # -- Tag; empty means appVersion.\n  tag: \"\"\n# -- Requests.\nresources:\n  requests:\n    cpu: 50m\n"
	dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("name: x\nversion: 1.0.0\n"), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(n), 0o644)
	out, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `replicas` | int | `2` | Replicas. Two lines. |",
		"| `image.tag` | string | `\"\"` | Tag; empty means appVersion. |",
		"| `resources` | object | `{\"requests\":{\"cpu\":\"50m\"}}` | Requests. |",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("README lacks the row\n%s\ngot:\n%s", want, out)
		}
	}
}
