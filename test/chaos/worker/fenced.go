package main

import (
	"context"
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/chaos"
)

// runFenced competes with pkg/elector; fence-on-acquire and every write are recorded.
func (w *worker) runFenced(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, c client.Client) error {
	fence, err := fencing.FenceOnAcquireForConfig(cfg)
	if err != nil {
		return err
	}
	var e *elector.Elector
	e, err = elector.New(elector.Config{
		Client: cs, Namespace: w.o.Namespace, Name: w.o.Lease, Identity: w.o.Identity,
		LeaseDuration: w.o.LeaseDuration, RenewDeadline: w.o.RenewDeadline, RetryPeriod: w.o.RetryPeriod,
		SafetyMargin: w.o.SafetyMargin,
		// Declared, as fencekit run does: the webhook admits the worker's writes from its copy of the Lease.
		PostAcquire: fence.Observe(func(_ context.Context, tok elector.Token) func(error) {
			done := w.call(chaos.Record{Op: w.nextOp(), Kind: chaos.KindFence, Epoch: tok.Epoch, BelievedLeader: true})
			return func(err error) { done(err, nil) }
		}),
		OnStartedLeading: func(ctx context.Context, tok elector.Token) { w.writeFenced(ctx, e, fencing.NewWriter(c), tok) },
	}, elector.WithClock(w.clock))
	if err != nil {
		return err
	}
	go w.readLoop(ctx, func(ctx context.Context) (*chaos.Value, error) { return readFenced(ctx, c, w.key()) })
	return e.Run(ctx)
}

func (w *worker) key() types.NamespacedName {
	return types.NamespacedName{Namespace: w.o.Namespace, Name: w.o.Target}
}

// writeFenced writes every interval while the elector says it leads. A refusal does not end the loop:
// the elector ends it when it learns that it lost the Lease, and until then every attempt is history.
func (w *worker) writeFenced(ctx context.Context, e *elector.Elector, wr *fencing.Writer, tok elector.Token) {
	w.writeLoop(ctx, e.IsLeader, func() {
		left := e.Deadline().Sub(w.clock.Now()) // what it believes, on its own (perhaps skewed) clock
		w.pauseIfArmed()
		id := w.nextOp()
		done := w.call(chaos.Record{Op: id, Kind: chaos.KindWrite, Epoch: tok.Epoch, BelievedLeader: true, DeadlineLeftMs: left.Milliseconds()})
		// Not the leadership context: a request under way when the process stops still reaches the server.
		wctx, cancel := context.WithTimeout(context.Background(), w.o.RequestTimeout)
		_, err := wr.Set(wctx, tok, w.key(), map[string]any{"op": id, "writer": tok.Holder, "epoch": tok.Epoch})
		cancel()
		done(err, nil)
	})
}

func readFenced(ctx context.Context, c client.Client, key types.NamespacedName) (*chaos.Value, error) {
	var fr fencingv1alpha1.FencedResource
	if err := c.Get(ctx, key, &fr); err != nil {
		return nil, err
	}
	v := &chaos.Value{Epoch: fr.Spec.FencedEpoch()}
	if fr.Spec.Data != nil {
		var d struct {
			Op string `json:"op"`
		}
		_ = json.Unmarshal(fr.Spec.Data.Raw, &d)
		v.Op = d.Op
	}
	return v, nil
}

// readLoop reads the target every interval, leading or not, until ctx ends.
func (w *worker) readLoop(ctx context.Context, read func(context.Context) (*chaos.Value, error)) {
	every(ctx, w.o.ReadInterval, func() bool {
		done := w.call(chaos.Record{Op: w.nextOp(), Kind: chaos.KindRead})
		rctx, cancel := context.WithTimeout(context.Background(), w.o.RequestTimeout)
		v, err := read(rctx)
		cancel()
		done(err, v)
		return true
	})
}

// writeLoop calls write every write interval while isLeader holds, until ctx ends.
func (w *worker) writeLoop(ctx context.Context, isLeader func() bool, write func()) {
	every(ctx, w.o.WriteInterval, func() bool {
		if !isLeader() {
			return false
		}
		write()
		return true
	})
}

// every calls f each interval until ctx ends or f returns false.
func every(ctx context.Context, interval time.Duration, f func() bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		if !f() {
			return
		}
	}
}
