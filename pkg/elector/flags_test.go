package elector

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The flags default to the Config's values, a zero timing to its documented default, and set the Config.
func TestBindFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		args []string
		want Config
	}{
		"defaults": {cfg: Config{Namespace: "default", Name: "orders"},
			want: Config{Namespace: "default", Name: "orders", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second,
				RetryPeriod: 2 * time.Second, SafetyMargin: 2 * time.Second}},
		"the Config's own timings are the defaults": {cfg: Config{RetryPeriod: time.Second, MaxClockDrift: 0.02},
			want: Config{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: time.Second,
				SafetyMargin: 2 * time.Second, MaxClockDrift: 0.02}},
		"every flag": {cfg: Config{Namespace: "default"},
			args: []string{"--namespace=shop", "--lease=orders", "--identity=a", "--lease-duration=4s", "--renew-deadline=3s",
				"--retry-period=500ms", "--safety-margin=0"},
			want: Config{Namespace: "shop", Name: "orders", Identity: "a", LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second,
				RetryPeriod: 500 * time.Millisecond}},
	} {
		t.Run(name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg := tc.cfg
			cfg.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, cfg, cmpopts.IgnoreUnexported(AcquireFence{})); diff != "" {
				t.Errorf("Config after parsing %q (-want +got):\n%s", tc.args, diff)
			}
		})
	}
}
