package managed_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// env is a control plane with fencekit's CRDs, shared by the package's tests (each in its own namespace).
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// managerOptions are a test manager's options: the control plane's scheme, no metrics or health server.
func managerOptions() manager.Options {
	return manager.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"}
}

// shortConfig is the elector "replica-a" on the Lease "operator" of ns (with the manager's client while
// Client is nil), with short durations: 2s lease, 1.5s renew deadline, 0.3s retry, 0.2s margin.
func shortConfig(ns string) elector.Config {
	return elector.Config{Namespace: ns, Name: "operator", Identity: "replica-a",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond, SafetyMargin: 200 * time.Millisecond}
}

// startManager runs mgr until the test ends, and waits for it to stop then.
func startManager(t *testing.T, mgr manager.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done }) //nolint:errcheck // Start ends with the cancellation
}
