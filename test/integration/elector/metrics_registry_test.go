package elector_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencekit/fencekit/pkg/elector"
)

// TestMetricsGoToTheRegistererGiven: a client-go program (no controller-runtime) passes its own registry
// with WithMetricsRegisterer and serves it with promhttp: the scrape shows fencekit_elector_is_leader 1 for
// the Lease once the elector leads. An elector built without the option registers nowhere: while it leads,
// prometheus.DefaultGatherer (what promhttp.Handler serves) has no fencekit_elector_* family.
func TestMetricsGoToTheRegistererGiven(t *testing.T) {
	ns := env.Namespace(t)
	reg := prometheus.NewRegistry()
	withReg, without := newHistory(), newHistory()
	run := func(cfg elector.Config, opts ...elector.Option) {
		e, err := elector.New(cfg, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	cfg := shortConfig(t, ns, "lock", "metrics-a")
	cfg.OnStartedLeading = withReg.lead
	run(cfg, elector.WithMetricsRegisterer(reg))
	cfg = shortConfig(t, ns, "other", "metrics-b")
	cfg.OnStartedLeading = without.lead
	run(cfg)
	withReg.wait(t, 30*time.Second)
	without.wait(t, 30*time.Second)

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	want := `fencekit_elector_is_leader{lease="` + ns + `/lock"} 1`
	var body string
	eventually(t, 10*time.Second, "the scrape shows "+want, func() bool {
		resp, err := http.Get(srv.URL)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && strings.Contains(body, want)
	})
	if strings.Contains(body, ns+"/other") {
		t.Errorf("the registry given to one elector shows the other's Lease:\n%s", body)
	}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "fencekit_elector_") {
			t.Errorf("an elector built without WithMetricsRegisterer registered %s with prometheus.DefaultRegisterer", mf.GetName())
		}
	}
}
