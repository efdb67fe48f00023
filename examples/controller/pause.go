package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pauseWrites is how many writes of the paused round wait for each other before the process stops: the
// update, the patch, the status patch and the canary's delete (its deletion marker).
const pauseWrites = 4

type roundKey struct{}

// withRound records the round a reconcile renders in its context (for the demonstration's pause).
func withRound(ctx context.Context, round string) context.Context {
	return context.WithValue(ctx, roundKey{}, round)
}

// pausingClient is demonstration only: a client.NewClientFunc whose client holds the writes of round
// pauseOnRound once they have all been handed to it, which is after the fenced client around it took its
// token for each and before any is sent: it logs "pausing" and waits until the process has been stopped
// (SIGSTOP) and continued (SIGCONT) from outside, as `fencekit-dev demo` does when it reads "pausing" and as a
// GC pause or CPU starvation could. The writes then run without the reconcile's context: requests already
// sent when a process stops still reach the apiserver, and only fencing stops them.
func pausingClient(pauseOnRound string) client.NewClientFunc {
	paused = &pause{round: pauseOnRound, all: make(chan struct{})}
	return func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return &pausing{Client: c, p: paused}, nil
	}
}

// paused is the process's pause, drained by main before it exits.
var paused *pause

// drain waits (at most timeout) for the writes of the paused round that are still under way: a process
// whose leadership is lost returns from mgr.Start without waiting for its reconciles.
func (p *pause) drain(timeout time.Duration) {
	if p == nil {
		return
	}
	done := make(chan struct{})
	go func() { p.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

type pause struct {
	round   string
	mu      sync.Mutex
	arrived int
	all     chan struct{}
	once    sync.Once
	// inflight counts the writes of the paused round still under way.
	inflight sync.WaitGroup
}

// wait returns the context to write with: ctx, or, for the writes of the paused round, a fresh one after
// the process was stopped and continued.
func (p *pause) wait(ctx context.Context) (context.Context, context.CancelFunc) {
	if round, _ := ctx.Value(roundKey{}).(string); round != p.round {
		return ctx, func() {}
	}
	p.inflight.Add(1)
	p.mu.Lock()
	p.arrived++
	if p.arrived == pauseWrites {
		close(p.all)
	}
	p.mu.Unlock()
	select {
	case <-p.all:
	case <-time.After(10 * time.Second):
	}
	p.once.Do(func() {
		// Subscribed before "pausing" is said, so the SIGCONT that ends the pause cannot be missed.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		defer signal.Stop(cont)
		log.Info("pausing", "round", p.round)
		<-cont
		log.Info("resumed", "round", p.round)
	})
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	return wctx, func() { cancel(); p.inflight.Done() }
}

type pausing struct {
	client.Client
	p *pause
}

func (c *pausing) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	ctx, cancel := c.p.wait(ctx)
	defer cancel()
	return c.Client.Update(ctx, obj, opts...)
}

func (c *pausing) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	ctx, cancel := c.p.wait(ctx)
	defer cancel()
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c *pausing) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	ctx, cancel := c.p.wait(ctx)
	defer cancel()
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *pausing) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c *pausing) SubResource(name string) client.SubResourceClient {
	return &pausingSub{SubResourceClient: c.Client.SubResource(name), p: c.p}
}

type pausingSub struct {
	client.SubResourceClient
	p *pause
}

func (c *pausingSub) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	ctx, cancel := c.p.wait(ctx)
	defer cancel()
	return c.SubResourceClient.Patch(ctx, obj, patch, opts...)
}
