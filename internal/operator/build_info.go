package operator

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencekit/fencekit/internal/version"
)

// buildInfo is the Prometheus convention for a build's identity: a gauge at 1 whose labels name it, to
// join with other series (`* on(instance) group_left(version) fencekit_build_info`).
var buildInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "fencekit_build_info",
	Help: "A gauge at 1 whose labels name the fencekit operator's build: version, git commit and Go version.",
}, []string{"version", "commit", "goversion"})

func init() {
	buildInfo.WithLabelValues(version.Version, version.Commit, runtime.Version()).Set(1)
	metrics.Registry.MustRegister(buildInfo)
}
