package testenv

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fencekit/fencekit/internal/operator"
)

// StartOperator runs fencekit's operator (webhook and controllers, no leader election) in the test process
// until the test ends or stop is called; the control plane must have been started WithWebhooks.
func (e *Env) StartOperator(t *testing.T) (stop func()) {
	t.Helper()
	w := e.Environment.WebhookInstallOptions
	mgr, err := operator.NewManager(e.Config, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: w.LocalServingHost, WebhookPort: w.LocalServingPort, WebhookCertDir: w.LocalServingCertDir,
		SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	started := mgr.GetWebhookServer().StartedChecker()
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return started(nil) == nil, nil
	}); err != nil {
		cancel()
		t.Fatalf("the operator's webhook server did not start: %v", err)
	}
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("operator: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}
