package testenv

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fencekit/fencekit/internal/operator"
)

// StartOperator runs fencekit's operator (webhook and controllers, no leader election unless changed by
// the options) in the test process until the test ends or stop is called; the control plane must have been
// started WithWebhooks.
func (e *Env) StartOperator(t testing.TB, change ...func(*operator.Options)) (stop func()) {
	t.Helper()
	w := e.Environment.WebhookInstallOptions
	opts := operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: w.LocalServingHost, WebhookPort: w.LocalServingPort, WebhookCertDir: w.LocalServingCertDir,
		WebhookConfigName:  "validating-webhook-configuration",
		SkipNameValidation: true,
	}
	for _, c := range change {
		c(&opts)
	}
	mgr, err := operator.NewManager(e.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if opts.WebhookPort != 0 {
		started := mgr.GetWebhookServer().StartedChecker()
		if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return started(nil) == nil, nil
		}); err != nil {
			cancel()
			t.Fatalf("the operator's webhook server did not start: %v", err)
		}
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

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
