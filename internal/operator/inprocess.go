package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// StartTimeout bounds how long Start waits for the operator's webhook server.
const StartTimeout = 30 * time.Second

// Start runs the operator (NewManager(cfg, opts)) in this process, as the demo, the benchmarks and the
// tests do, and returns once its webhook server serves (at once when opts.WebhookPort is 0). ctx bounds
// only that wait: the operator runs until stop is called. stop stops it, waits for it to end and returns
// the error it ended with, if any other than its cancellation; calling stop again returns the same.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (stop func() error, err error) {
	mgr, err := NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	var (
		once    sync.Once
		stopErr error
		ended   bool // done was read while waiting for the webhook server
	)
	stop = func() error {
		once.Do(func() {
			cancel()
			if !ended {
				stopErr = <-done
			}
			if errors.Is(stopErr, context.Canceled) {
				stopErr = nil
			}
		})
		return stopErr
	}
	if opts.WebhookPort == 0 {
		return stop, nil
	}
	started := mgr.GetWebhookServer().StartedChecker()
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, StartTimeout, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			ended, stopErr = true, err
			return false, fmt.Errorf("the operator stopped: %w", err)
		default:
		}
		return started(nil) == nil, nil
	})
	if err != nil {
		_ = stop()
		return nil, fmt.Errorf("starting the operator's webhook server on %s:%d: %w", opts.WebhookHost, opts.WebhookPort, err)
	}
	return stop, nil
}
