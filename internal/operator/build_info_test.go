package operator_test

import (
	"runtime"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencekit/fencekit/internal/version"
)

// TestBuildInfo: the operator's registry (what its /metrics endpoint serves) has fencekit_build_info at 1,
// labelled with the build's version, commit and Go version, and only that series.
func TestBuildInfo(t *testing.T) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"version": version.Version, "commit": version.Commit, "goversion": runtime.Version()}
	for _, f := range families {
		if f.GetName() != "fencekit_build_info" {
			continue
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("fencekit_build_info has %d series, want 1", len(f.GetMetric()))
		}
		m := f.GetMetric()[0]
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		if len(got) != len(want) || got["version"] != want["version"] || got["commit"] != want["commit"] || got["goversion"] != want["goversion"] {
			t.Errorf("fencekit_build_info labels %v, want %v", got, want)
		}
		if v := m.GetGauge().GetValue(); v != 1 {
			t.Errorf("fencekit_build_info = %v, want 1", v)
		}
		return
	}
	t.Fatal("no fencekit_build_info in the operator's metrics registry")
}
