package managed_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/elector/managed"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestFenceLogsThroughTheManager: the elector that Fence builds logs through the manager's logger (named
// "elector"), not klog's global one, although the manager starts the gate with a context that carries no
// logger.
func TestFenceLogsThroughTheManager(t *testing.T) {
	ns := env.Namespace(t)
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, prefix+" "+args)
	}, funcr.Options{})
	base, err := manager.New(env.Config, manager.Options{Scheme: env.Scheme, Logger: log,
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := managed.Fence(base, elector.Config{Namespace: ns, Name: "operator", Identity: "replica-a",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond, SafetyMargin: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testenv.Eventually(t, "the elector's \"Acquired the Lease\" line in the manager's log", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if strings.HasPrefix(l, "elector ") && strings.Contains(l, `"msg"="Acquired the Lease"`) &&
				strings.Contains(l, fmt.Sprintf(`"lease"="%s/operator"`, ns)) {
				return true, ""
			}
		}
		return false, strings.Join(lines, "\n")
	})
}
