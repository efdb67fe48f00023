package elector

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// idleClient is a real clientset for an address nothing listens on: New checks its Config and sends
// nothing.
func idleClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestConfigValidation(t *testing.T) {
	valid := func() Config {
		return Config{Client: idleClient(t), Namespace: "ns", Name: "lock", Identity: "me"}
	}
	tests := map[string]struct {
		mutate func(*Config)
		want   string // "" = valid
	}{
		"defaults": {mutate: func(*Config) {}},
		"short durations with a small margin": {mutate: func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod, c.SafetyMargin = 2*time.Second, 1500*time.Millisecond, 300*time.Millisecond, 200*time.Millisecond
		}},
		"no client": {mutate: func(c *Config) { c.Client = nil }, want: "elector: invalid config: client must be set"},
		"no names": {mutate: func(c *Config) { c.Namespace, c.Name = "", "" },
			want: "elector: invalid config: lease namespace must be set\nlease name must be set"},
		"lease duration not above renew deadline": {mutate: func(c *Config) { c.LeaseDuration = 10 * time.Second },
			want: "elector: invalid config: leaseDuration (10s) must be greater than renewDeadline (10s)\n" +
				"the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = 10s*(1-0.01)-2s = 7.9s must be greater than renewDeadline (10s)"},
		"renew deadline not above retry period": {mutate: func(c *Config) { c.RetryPeriod = 10 * time.Second },
			want: "elector: invalid config: renewDeadline (10s) must be greater than retryPeriod (10s)"},
		"negative retry period": {mutate: func(c *Config) { c.RetryPeriod = -time.Second },
			want: "elector: invalid config: retryPeriod must be positive, got -1s"},
		"drift of 1": {mutate: func(c *Config) { c.MaxClockDrift = 1 },
			want: "elector: invalid config: maxClockDrift must be in [0, 1), got 1\n" +
				"the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = 15s*(1-1)-2s = -2s must be greater than renewDeadline (10s)"},
		"negative drift": {mutate: func(c *Config) { c.MaxClockDrift = -0.1 },
			want: "elector: invalid config: maxClockDrift must be in [0, 1), got -0.1"},
		"negative margin": {mutate: func(c *Config) { c.SafetyMargin = -time.Second },
			want: "elector: invalid config: safetyMargin must not be negative, got -1s"},
		"negative lock delay": {mutate: func(c *Config) { c.LockDelay = -time.Second },
			want: "elector: invalid config: lockDelay must not be negative, got -1s"},
		"margin eats the window": {mutate: func(c *Config) { c.SafetyMargin = 5 * time.Second },
			want: "elector: invalid config: the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = 15s*(1-0.01)-5s = 9.85s must be greater than renewDeadline (10s)"},
		"fences declared without a hook": {mutate: func(c *Config) { c.PostAcquire = AcquireFence{fences: protocol.Fences{Objects: true}} },
			want: `elector: invalid config: postAcquire declares "objects" but has no hook to raise them`},
		"negative release timeout": {mutate: func(c *Config) { c.ReleaseTimeout = -time.Second },
			want: "elector: invalid config: releaseTimeout must be positive, got -1s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := valid()
			tc.mutate(&cfg)
			_, err := New(cfg, WithMetricsRegisterer(nil))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("New() error:\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
}

func TestDefaultIdentity(t *testing.T) {
	t.Setenv("POD_NAME", "orders-7d9f")
	e, err := New(Config{Client: idleClient(t), Namespace: "ns", Name: "lock"}, WithMetricsRegisterer(nil))
	if err != nil {
		t.Fatal(err)
	}
	if id := e.Identity(); !strings.HasPrefix(id, "orders-7d9f-") || len(id) != len("orders-7d9f-")+5 {
		t.Errorf("Identity() = %q, want orders-7d9f-<5 random characters>", id)
	}
}
