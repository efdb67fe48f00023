package controllers_test

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
)

// TestStatusCoalescesDataWrites: under sustained writes of data by the holder, the operator writes a
// resource's status at most once per status interval (each status write changes the resourceVersion and
// makes the apiserver admit the holder's next write twice), and once the writes stop, observedGeneration
// catches up with the last write's generation without any further event, as kstatus and Argo CD expect.
func TestStatusCoalescesDataWrites(t *testing.T) {
	ctx, ns := startOperator(t)
	a := newWorker(t, ns, "worker-a")
	a.LeaseDuration = time.Hour // not renewed during the test
	key := declare(t, ns, "orders", "orders-writer")
	tok := a.Acquire(t, ns, "orders-writer", 3)
	write := func(seq int) {
		t.Helper()
		fr := &fencingv1alpha1.FencedResource{}
		fr.Namespace, fr.Name = key.Namespace, key.Name
		p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"epoch":%d,"data":{"seq":%d}}}`,
			fencingv1alpha1.WriterAnnotation, tok.Holder, tok.Epoch, seq)
		if err := a.Client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(tok.FieldManager())); err != nil {
			t.Fatalf("the holder's write %d: %v", seq, err)
		}
	}
	write(0)
	eventuallyStatus(t, "the holder's first write at epoch 3 is in status at once (admittedEpoch changed)", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 3, LeaseHolder: "worker-a",
			Conditions: atLeaseEpoch("3")})

	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &fencingv1alpha1.FencedResourceList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	const writes = 60
	start := time.Now()
	for i := 1; i <= writes; i++ {
		write(i)
	}
	burst := time.Since(start)
	fr := eventuallyStatus(t, "after the writes stop, the status catches up with the last write's generation", key,
		fencingv1alpha1.FencedResourceStatus{AdmittedEpoch: 3, Holder: "worker-a", LeaseEpoch: 3, LeaseHolder: "worker-a",
			Conditions: atLeaseEpoch("3")})
	elapsed := time.Since(start)

	// Count the status writes among the events up to the resourceVersion seen above: a status write
	// leaves the generation as it was.
	statusWrites, gen, seen := 0, int64(-1), ""
	for seen != fr.ResourceVersion {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				t.Fatalf("unexpected watch event %s: %v", ev.Type, ev.Object)
			}
			o := ev.Object.(*fencingv1alpha1.FencedResource)
			if gen >= 0 && o.Generation == gen {
				statusWrites++
			}
			gen, seen = o.Generation, o.ResourceVersion
		case <-time.After(30 * time.Second):
			t.Fatalf("the watch never reached resourceVersion %s (last %s)", fr.ResourceVersion, seen)
		}
	}
	// Status writes that change only observedGeneration are at least one interval apart, so their number
	// is bounded by the time they were spread over, whatever the speed of this machine.
	bound := int(elapsed/controllers.DefaultStatusInterval) + 1
	t.Logf("%d writes in %s; %d status writes until the status caught up after %s (at most %d allowed)",
		writes, burst, statusWrites, elapsed, bound)
	if statusWrites > bound {
		t.Errorf("%d status writes over %s of sustained data writes: want at most one per %s (%d)",
			statusWrites, elapsed, controllers.DefaultStatusInterval, bound)
	}
}
