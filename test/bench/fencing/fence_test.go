package fencing_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/pkg/fencing"
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
	startOperator(b)
	setWebhook(b, true)
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("resources=%d", n), func(b *testing.B) {
			ns := env.Namespace(b)
			holders := []worker{newWorker(b, ns, "holder-a"), newWorker(b, ns, "holder-b")}
			for i := range n {
				declare(b, ns, fmt.Sprintf("fenced-%03d", i), "bench-writer")
			}
			ds := make([]time.Duration, 0, fenceRepeats)
			var sent, conflicts int64
			for epoch := int64(1); epoch <= fenceRepeats+1; epoch++ {
				w := holders[epoch%2]
				c, u := countingClient(b, w.Config)
				tok := w.Acquire(b, ns, "bench-writer", epoch)
				start := time.Now()
				if err := fencing.FenceOnAcquire(c)(b.Context(), tok); err != nil {
					b.Fatalf("fencing %d resources at epoch %d: %v", n, epoch, err)
				}
				if epoch > 1 {
					ds = append(ds, time.Since(start))
					sent, conflicts = sent+u.sent.Load(), conflicts+u.conflicts.Load()
				}
			}
			b.ReportMetric(ms(quantile(ds, 0.5)), "p50-ms")
			b.ReportMetric(ms(quantile(ds, 1)), "max-ms")
			b.ReportMetric(ms(quantile(ds, 0.5))/float64(n), "p50-ms/resource")
			b.ReportMetric(float64(sent)/float64(fenceRepeats*n), "writes/resource")
			b.ReportMetric(float64(conflicts)/float64(fenceRepeats*n), "conflicts/resource")
		})
	}
	// The same hook with client-go's default client-side rate limit (5 QPS, burst 10), which a client
	// built from a rest.Config with QPS unset gets: one acquisition, 100 resources.
	b.Run("resources=100/client-go-default-rate-limit", func(b *testing.B) {
		ns := env.Namespace(b)
		w := newWorker(b, ns, "holder-a")
		cfg := rest.CopyConfig(w.Config)
		cfg.QPS, cfg.Burst = 0, 0
		limited, u := countingClient(b, cfg)
		for i := range 100 {
			declare(b, ns, fmt.Sprintf("fenced-%03d", i), "bench-writer")
		}
		tok := w.Acquire(b, ns, "bench-writer", 1)
		start := time.Now()
		if err := fencing.FenceOnAcquire(limited)(b.Context(), tok); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(ms(time.Since(start)), "ms")
		b.ReportMetric(float64(u.sent.Load())/100, "writes/resource")
		b.ReportMetric(float64(u.conflicts.Load())/100, "conflicts/resource")
	})
}
