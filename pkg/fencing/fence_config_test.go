package fencing_test

import (
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// The ForConfig fences refuse a nil rest.Config with an error, and leave the caller's config as it was:
// its client-side rate limit still applies to the caller's own clients.
func TestFenceForConfigInput(t *testing.T) {
	for name, build := range map[string]func(*rest.Config) (elector.AcquireFence, error){
		"FenceOnAcquireForConfig":        fencing.FenceOnAcquireForConfig,
		"FenceObjectsOnAcquireForConfig": fencing.FenceObjectsOnAcquireForConfig,
	} {
		t.Run(name, func(t *testing.T) {
			if fence, err := build(nil); err == nil || !fence.IsZero() || !strings.Contains(err.Error(), "no rest.Config") {
				t.Errorf("%s(nil) = (fence %t, %v), want no fence and an error saying no rest.Config was given", name, !fence.IsZero(), err)
			}
			// QPS and Burst 0 (client-go's defaults); building the fence sends no request, so nothing listens.
			cfg := &rest.Config{Host: "https://127.0.0.1:1"}
			if _, err := build(cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != 0 || cfg.Burst != 0 || cfg.RateLimiter != nil {
				t.Errorf("%s changed the caller's config to QPS %v, Burst %d, RateLimiter %v; want it left at 0, 0, nil", name, cfg.QPS, cfg.Burst, cfg.RateLimiter)
			}
		})
	}
}
