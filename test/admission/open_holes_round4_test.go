//go:build openholes

package admission_test

// Round 4 of the independent attacker: what is still open. Run with
//
//	go test -tags openholes -count=1 -run 'TestRound4' -v ./test/admission/
//
// Load-dependent: with the Lease's labels and annotations bounded to 64, a storm of free writes on a fenced
// Lease by another elector-role user (about 80 a second) still cost the holder its renewal once on a
// machine running the whole suite (CI), and not on a quieter one: every write of the Lease, the storm's
// too, goes through the Lease policy, and the renewal competes with them.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/operatortest"
)

// TestRound4LeaseLabelsSlowEveryRenewal: the Lease policy counts a fenced Lease's labels and annotations
// in CEL on every write; its cost follows their number, and a user with update on leases (the elector
// role, a GitOps tool) may add tens of thousands of short labels within the byte bound (the CEL budget
// refuses 45,000; 30,000 pass). Every write of the Lease then spends seconds in admission. That user then
// rewrites a free annotation of the Lease from three goroutines: the elector's renewal, a compare-and-swap
// on its last write, loses to one of those writes during its own admission, again and again, and the
// holder loses leadership without anyone acquiring the Lease (I2: a write without the token makes the
// holder's next write fail; "nothing a non-holder writes may lock the holder out"). The same storm on the
// unpadded Lease is the control.
func TestRound4LeaseLabelsSlowEveryRenewal(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "slow"
	holder := newWorker(t, ns, "app-operator")
	intruder := newWorker(t, ns, "intruder")
	cs, err := kubernetes.NewForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	led := make(chan elector.Token, 1)
	var stopped atomic.Int64
	e, err := elector.New(elector.Config{Client: cs, Namespace: ns, Name: lease, Identity: holder.Holder,
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			led <- tok
			<-ctx.Done()
		},
		OnStoppedLeading: func() { stopped.Add(1) }}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(runCtx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-led:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not lead")
	}
	key := types.NamespacedName{Namespace: ns, Name: lease}
	ic := unthrottled(t, intruder.User)
	edit := func(ctx context.Context, change func(*coordinationv1.Lease)) error {
		return retry.RetryOnConflict(wait.Backoff{Steps: 1000, Duration: time.Millisecond}, func() error {
			var l coordinationv1.Lease
			if err := ic.Get(ctx, key, &l); err != nil {
				return err
			}
			change(&l)
			return ic.Update(ctx, &l)
		})
	}
	storm := func(what string, d time.Duration) {
		sctx, stop := context.WithTimeout(ctx, d)
		defer stop()
		var writes atomic.Int64
		var g sync.WaitGroup
		for n := range 3 {
			g.Go(func() {
				for i := 0; sctx.Err() == nil; i++ {
					if edit(sctx, func(l *coordinationv1.Lease) { l.Annotations["example.com/t"] = fmt.Sprintf("%d-%d", n, i) }) == nil {
						writes.Add(1)
					}
				}
			})
		}
		g.Wait()
		t.Logf("%s: %d writes of a free annotation in %v; the elector leads: %v, stopped leading %d times", what, writes.Load(), d, e.IsLeader(), stopped.Load())
	}
	storm("the unpadded Lease (control)", 10*time.Second)
	if !e.IsLeader() || stopped.Load() > 0 {
		t.Fatalf("the elector lost leadership to a storm of free writes on the unpadded Lease (control)")
	}
	err = edit(ctx, func(l *coordinationv1.Lease) {
		for i := range 30000 {
			l.Labels[fmt.Sprintf("%x", i)] = ""
		}
	})
	mustContain(t, "the intruder's 30,000 labels on the fenced Lease", err, nil, "over the bound of 64")
	// As many as the bound lets in.
	if err := edit(ctx, func(l *coordinationv1.Lease) {
		for i := 0; len(l.Labels)+len(l.Annotations) < 64; i++ {
			l.Labels[fmt.Sprintf("%x", i)] = ""
		}
	}); err != nil {
		t.Fatalf("the intruder's labels up to the bound: %v", err)
	}
	storm("the Lease with 64 labels and annotations", 20*time.Second)
	if !e.IsLeader() || stopped.Load() > 0 {
		l := env.ReadLease(t, ns, lease)
		t.Errorf("the holder lost leadership to free writes on a Lease padded with short labels (I2); the Lease names holder %q at epoch %s",
			ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations[elector.EpochAnnotation])
	}
}
