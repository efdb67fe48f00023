package fencing_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// fenceRepeats is the number of acquisitions measured per size, after one warm-up acquisition.
const fenceRepeats = 7

// BenchmarkFenceOnAcquire measures pkg/fencing's fence-on-acquire hook (what the elector runs between an
// acquisition and handing leadership to user code) for 1, 10 and 100 FencedResources bound to the Lease:
// two holders take the Lease in turn, each acquisition at a new epoch, and the hook raises every bound
// resource to it through the webhook, one JSON merge patch per resource. The operator (webhook and
// controllers) runs in process. Each acquisition's hook writes through a client that counts its writes
// (PATCH requests) and their conflicts, reported per resource.
func BenchmarkFenceOnAcquire(b *testing.B) {
	operatortest.Start(b, env)
	setWebhook(b, true)
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			ns := env.Namespace(b)
			holders := []worker{newWorker(b, ns, "holder-a"), newWorker(b, ns, "holder-b")}
			fenceRounds(b, ns, n, holders, func(w worker) (elector.AcquireFence, func() (int64, int64)) {
				c, u := countingClient(b, w.Config)
				return fencing.FenceOnAcquire(c), func() (int64, int64) { return u.sent.Load(), u.conflicts.Load() }
			})
		})
	}
	// 100 resources from a rest.Config at client-go's default client-side rate limit (QPS and Burst unset:
	// 5 QPS, burst 10), what rest.InClusterConfig and clientcmd.BuildConfigFromFlags return, in the same run:
	// own-client is FenceOnAcquire with the user's client built from that config (its limiter applies to
	// the fence: one acquisition, since it takes about 18 s); for-config is the hook FenceOnAcquireForConfig
	// builds from the same config, whose own client has no client-side limiter, measured as above.
	b.Run("resources=100/client-go-default-rate-limit/own-client", func(b *testing.B) {
		ns := env.Namespace(b)
		w := newWorker(b, ns, "holder-a")
		limited, u := countingClient(b, clientGoDefaultLimit(w.Config))
		for i := range 100 {
			declare(b, ns, fmt.Sprintf("fenced-%03d", i), "bench-writer")
		}
		tok := w.Acquire(b, ns, "bench-writer", 1)
		start := time.Now()
		if err := fencing.FenceOnAcquire(limited).Raise(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ms(time.Since(start)), "ms")
		b.ReportMetric(float64(u.sent.Load())/100, "writes/resource")
		b.ReportMetric(float64(u.conflicts.Load())/100, "conflicts/resource")
	})
	b.Run("resources=100/client-go-default-rate-limit/for-config", func(b *testing.B) {
		const n = 100
		ns := env.Namespace(b)
		holders := []worker{newWorker(b, ns, "holder-a"), newWorker(b, ns, "holder-b")}
		hooks := map[string]elector.AcquireFence{}
		var patches, conflicts atomic.Int64
		for _, w := range holders {
			cfg := clientGoDefaultLimit(w.Config)
			cfg.Wrap(countPatches(&patches, &conflicts))
			hook, err := fencing.FenceOnAcquireForConfig(cfg)
			if err != nil {
				b.Fatal(err)
			}
			hooks[w.Holder] = hook
		}
		fenceRounds(b, ns, n, holders, func(w worker) (elector.AcquireFence, func() (int64, int64)) {
			patches.Store(0)
			conflicts.Store(0)
			return hooks[w.Holder], func() (int64, int64) { return patches.Load(), conflicts.Load() }
		})
	})
}

// fenceRounds declares n FencedResources bound to Lease bench-writer in ns; then the holders take the
// Lease in turn, fenceRepeats+1 times, each at a new epoch, and each acquisition raises every resource
// with the hook that fence returns for its holder. It reports the p50 and the max of the raises after the
// first (a warm-up), the p50 per resource, and the writes and conflicts per resource that fence's counter
// returned after each of those raises.
func fenceRounds(b *testing.B, ns string, n int, holders []worker, fence func(worker) (elector.AcquireFence, func() (sent, conflicts int64))) {
	b.Helper()
	for i := range n {
		declare(b, ns, fmt.Sprintf("fenced-%03d", i), "bench-writer")
	}
	ds := make([]time.Duration, 0, fenceRepeats)
	var sent, conflicts int64
	for epoch := int64(1); epoch <= fenceRepeats+1; epoch++ {
		w := holders[epoch%int64(len(holders))]
		hook, counts := fence(w)
		tok := w.Acquire(b, ns, "bench-writer", epoch)
		start := time.Now()
		if err := hook.Raise(b.Context(), tok); err != nil {
			b.Fatalf("fencing %d resources at epoch %d: %v", n, epoch, err)
		}
		if epoch > 1 {
			ds = append(ds, time.Since(start))
			s, c := counts()
			sent, conflicts = sent+s, conflicts+c
		}
	}
	b.ReportMetric(ms(quantile(ds, 0.5)), "p50-ms")
	b.ReportMetric(ms(quantile(ds, 1)), "max-ms")
	b.ReportMetric(ms(quantile(ds, 0.5))/float64(n), "p50-ms/resource")
	b.ReportMetric(float64(sent)/float64(fenceRepeats*n), "writes/resource")
	b.ReportMetric(float64(conflicts)/float64(fenceRepeats*n), "conflicts/resource")
}

// clientGoDefaultLimit returns cfg with client-go's default client-side rate limit (QPS and Burst unset).
func clientGoDefaultLimit(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = 0, 0, nil
	return cfg
}

// countPatches counts the PATCH requests of a transport and those answered 409 Conflict.
func countPatches(patches, conflicts *atomic.Int64) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if r.Method == http.MethodPatch {
				patches.Add(1)
				if err == nil && resp.StatusCode == http.StatusConflict {
					conflicts.Add(1)
				}
			}
			return resp, err
		})
	}
}
