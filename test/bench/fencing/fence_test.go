package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"

	"github.com/fencekit/fencekit/pkg/fencing"
)

// fenceRepeats is the number of acquisitions measured per size, after one warm-up acquisition.
const fenceRepeats = 7

// fenceByPatch is fence-on-acquire as the fix proposed in docs/benchmarks.md would do it: one merge patch
// per bound resource (epoch and writer, no resourceVersion), so that the operator's status updates, which
// change the resourceVersion of every bound resource right after an acquisition, cause no conflicts. It is
// as safe as an update: the CRD's rule and the webhook check the epoch inside the apiserver.
func fenceByPatch(c client.Client) func(ctx context.Context, tok elector.Token) error {
	return func(ctx context.Context, tok elector.Token) error {
		var list fencingv1alpha1.FencedResourceList
		if err := c.List(ctx, &list, client.InNamespace(tok.Lease.Namespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("spec.leaseName", tok.Lease.Name)}); err != nil {
			return err
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"epoch":%d}}`, fencingv1alpha1.WriterAnnotation, tok.Holder, tok.Epoch)
		errs := make([]error, len(list.Items))
		workqueue.ParallelizeUntil(ctx, 16, len(list.Items), func(i int) {
			if list.Items[i].Spec.Epoch != tok.Epoch {
				errs[i] = c.Patch(ctx, &list.Items[i], client.RawPatch(types.MergePatchType, []byte(patch)))
			}
		})
		return errors.Join(errs...)
	}
}

// BenchmarkFenceOnAcquire measures pkg/fencing's fence-on-acquire hook (what the elector runs between an
// acquisition and handing leadership to user code) for 1, 10 and 100 FencedResources bound to the Lease:
// two holders take the Lease in turn, each acquisition at a new epoch, and the hook raises every bound
// resource to it through the webhook. The operator (webhook and controllers) runs in process.
func BenchmarkFenceOnAcquire(b *testing.B) {
	startOperator(b)
	setWebhook(b, true)
	type variant struct {
		name string
		hook func(client.Client) func(context.Context, elector.Token) error
	}
	runs := []struct {
		n int
		variant
	}{
		{1, variant{"", fencing.FenceOnAcquire}}, {10, variant{"", fencing.FenceOnAcquire}}, {100, variant{"", fencing.FenceOnAcquire}},
		{100, variant{"/merge-patch-proposed", fenceByPatch}},
	}
	for _, r := range runs {
		n := r.n
		b.Run(fmt.Sprintf("resources=%d%s", n, r.name), func(b *testing.B) {
			ns := env.Namespace(b)
			holders := []worker{newWorker(b, ns, "holder-a"), newWorker(b, ns, "holder-b")}
			for i := range n {
				declare(b, ns, fmt.Sprintf("fenced-%03d", i), "bench-writer")
			}
			ds := make([]time.Duration, 0, fenceRepeats)
			var sent, conflicts int64
			for epoch := int64(1); epoch <= fenceRepeats+1; epoch++ {
				w := holders[epoch%2]
				c, u := countingClient(b, w.config)
				tok := w.acquire(b, ns, "bench-writer", epoch)
				start := time.Now()
				if err := r.hook(c)(b.Context(), tok); err != nil {
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
	for _, v := range []struct {
		name string
		hook func(client.Client) func(context.Context, elector.Token) error
	}{{"", fencing.FenceOnAcquire}, {"/merge-patch-proposed", fenceByPatch}} {
		b.Run("resources=100/client-go-default-rate-limit"+v.name, func(b *testing.B) {
			ns := env.Namespace(b)
			w := newWorker(b, ns, "holder-a")
			cfg := rest.CopyConfig(w.config)
			cfg.QPS, cfg.Burst = 0, 0
			limited, u := countingClient(b, cfg)
			for i := range 100 {
				declare(b, ns, fmt.Sprintf("fenced-%03d", i), "bench-writer")
			}
			tok := w.acquire(b, ns, "bench-writer", 1)
			start := time.Now()
			if err := v.hook(limited)(b.Context(), tok); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(ms(time.Since(start)), "ms")
			b.ReportMetric(float64(u.sent.Load())/100, "writes/resource")
			b.ReportMetric(float64(u.conflicts.Load())/100, "conflicts/resource")
		})
	}
}
