package managed

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/fencekit/fencekit/pkg/elector"
)

// Gate runs an elector and, while it leads, the leader-only runnables added to it.
type Gate struct {
	e *elector.Elector

	mu        sync.Mutex
	runnables []manager.Runnable
	started   bool

	// failed receives why the gate must stop the manager: leadership lost, or a runnable failed.
	failed chan error
}

var (
	_ manager.Runnable               = (*Gate)(nil)
	_ manager.LeaderElectionRunnable = (*Gate)(nil)
)

// NewGate builds the elector from cfg and opts (see elector.New) and a Gate around it. A manager starts
// the gate with a context that carries no logger, so pass elector.WithLogger(mgr.GetLogger()) for the
// elector to log through the manager's logger (Fence does). The elector's metrics go to controller-runtime's
// metrics.Registry, which the manager serves, unless opts set elector.WithMetricsRegisterer. The gate chains
// cfg.OnStartedLeading and cfg.OnStoppedLeading: they still run, and the leader-only runnables start
// alongside OnStartedLeading with the same leadership context.
func NewGate(cfg elector.Config, opts ...elector.Option) (*Gate, error) {
	g := &Gate{failed: make(chan error, 1)}
	userStarted := cfg.OnStartedLeading
	cfg.OnStartedLeading = func(ctx context.Context, t elector.Token) {
		g.lead(ctx, t, userStarted)
	}
	opts = append([]elector.Option{elector.WithMetricsRegisterer(ctrlmetrics.Registry)}, opts...)
	e, err := elector.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	g.e = e
	return g, nil
}

// Elector is the gate's elector, for its Token, Deadline and IsLeader.
func (g *Gate) Elector() *elector.Elector { return g.e }

// Add registers a runnable that must run only while this replica leads. Call it before the manager
// starts.
func (g *Gate) Add(r manager.Runnable) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return errors.New("managed: Add called after the gate started")
	}
	g.runnables = append(g.runnables, r)
	return nil
}

// NeedLeaderElection is false: the gate itself runs on every replica; it does its own election.
func (g *Gate) NeedLeaderElection() bool { return false }

// Start runs the elector until ctx ends (then it returns nil, having released the Lease) or leadership is
// lost or a leader-only runnable fails (then it returns the reason, so that the manager stops).
func (g *Gate) Start(ctx context.Context) error {
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		return errors.New("managed: the gate was started more than once")
	}
	g.started = true
	g.mu.Unlock()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.e.Run(runCtx) }()
	select {
	case err := <-done:
		return err
	case err := <-g.failed:
		cancel()
		<-done //nolint:errcheck // after cancel, Run's error only says that it was cancelled; err is the failure
		return err
	}
}

// lead runs OnStartedLeading's part: the user's callback and the leader-only runnables, all with the
// leadership context, until it ends.
func (g *Gate) lead(ctx context.Context, t elector.Token, userStarted func(context.Context, elector.Token)) {
	g.mu.Lock()
	runnables := append([]manager.Runnable(nil), g.runnables...)
	g.mu.Unlock()
	var wg sync.WaitGroup
	if userStarted != nil {
		wg.Go(func() { userStarted(ctx, t) })
	}
	for _, r := range runnables {
		wg.Go(func() {
			if err := r.Start(ctx); err != nil && ctx.Err() == nil {
				g.fail(fmt.Errorf("managed: leader-only runnable failed at epoch %d: %w", t.Epoch, err))
			}
		})
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, elector.ErrReleased) {
		g.fail(fmt.Errorf("managed: leadership of %s lost: %w", t, cause))
	}
	wg.Wait()
}

func (g *Gate) fail(err error) {
	select {
	case g.failed <- err:
	default:
	}
}
