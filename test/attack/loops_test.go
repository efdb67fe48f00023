package attack

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// loops are the tight loops of free writes of a kLoop step: they run while the holder writes and
// deletes (I2), as fast as the apiserver answers, and stop after it.
type loops struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	writes atomic.Int64
	ok     atomic.Int64
}

// startLoops starts s.count loops of s.loop on s.target as s.actor.
func (w *world) startLoops(s step) *loops {
	a := w.actors[s.actor]
	ctx, cancel := context.WithCancel(w.t.Context())
	l := &loops{cancel: cancel}
	ri := a.dyn.Resource(gvrOf(s.route.parent.Resource)).Namespace(w.ns)
	for g := range s.count {
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				var patch string
				pt := types.MergePatchType
				switch s.loop {
				case "relabel":
					patch = fmt.Sprintf(`{"metadata":{"labels":{"churn-%d":"%d"}}}`, g, i)
				case "annotate":
					patch = fmt.Sprintf(`{"metadata":{"annotations":{"example.com/churn-%d":"%d"}}}`, g, i)
				case "finalizers":
					pt = types.StrategicMergePatchType
					patch = fmt.Sprintf(`{"metadata":{"finalizers":["example.com/churn-%d"]}}`, g)
					if i%2 == 1 {
						patch = fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["example.com/churn-%d"]}}`, g)
					}
				}
				_, err := ri.Patch(ctx, s.target, pt, []byte(patch), metav1.PatchOptions{})
				l.writes.Add(1)
				if err == nil {
					l.ok.Add(1)
				}
			}
		})
	}
	return l
}

// stop stops the loops and removes the finalizers they left.
func (l *loops) stop(w *world, s step) string {
	l.cancel()
	l.wg.Wait()
	if s.loop == "finalizers" {
		ri := w.actors[s.actor].dyn.Resource(gvrOf(s.route.parent.Resource)).Namespace(w.ns)
		for g := range s.count {
			patch := fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["example.com/churn-%d"]}}`, g)
			_, _ = ri.Patch(context.Background(), s.target, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		}
	}
	return fmt.Sprintf("%d loop writes, %d admitted", l.writes.Load(), l.ok.Load())
}
