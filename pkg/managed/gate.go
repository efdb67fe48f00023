package managed

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/config"
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
	// setup, when set (EachTerm), builds each term's leader-only runnables on a manager derived from
	// termBase; a lost term then stops them and the gate stands by for the next.
	setup    func(manager.Manager) error
	termBase manager.Manager

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
// starts. A gate that builds its runnables each term (EachTerm) refuses it: a controller cannot be
// started twice, so build it in the setup function instead.
func (g *Gate) Add(r manager.Runnable) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return errors.New("managed: Add called after the gate started")
	}
	if g.setup != nil {
		return fmt.Errorf("managed: a leader-only runnable (%T) added outside the setup function: the gate builds its leader-only runnables anew for each term (EachTerm, FenceEachTerm); build it in the setup function, which gets a manager to add it to", r)
	}
	g.runnables = append(g.runnables, r)
	return nil
}

// EachTerm makes the gate step back when leadership is lost instead of stopping the manager: setup runs
// at the start of each term with a manager derived from mgr (the same cache, client and scheme; Add
// collects the term's leader-only runnables, controllers' names are not checked for uniqueness, since
// each term builds the same ones again), and the runnables it added run with that term's leadership
// context. When the term ends they stop; the gate waits for them (up to the elector's ReleaseTimeout) and
// competes again, and the next term calls setup anew. Build controllers in setup (SetupWithManager),
// never webhooks, which serve on every replica and are registered once, before the manager starts. Call
// EachTerm before the manager starts and before any Add. A setup error or a runnable that fails while
// its term lasts still stops the manager.
func (g *Gate) EachTerm(mgr manager.Manager, setup func(manager.Manager) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case setup == nil:
		return errors.New("managed: EachTerm needs a setup function")
	case g.started:
		return errors.New("managed: EachTerm called after the gate started")
	case len(g.runnables) > 0:
		return fmt.Errorf("managed: EachTerm called after %d leader-only runnables were added, which could run only once: build them in the setup function", len(g.runnables))
	}
	g.setup, g.termBase = setup, mgr
	return nil
}

// NeedLeaderElection is false: the gate itself runs on every replica; it does its own election.
func (g *Gate) NeedLeaderElection() bool { return false }

// Start runs the elector until ctx ends (then it returns nil, having released the Lease) or leadership is
// lost (unless EachTerm: then it stands by) or a leader-only runnable fails (then it returns the reason,
// so that the manager stops).
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
	setup, base := g.setup, g.termBase
	g.mu.Unlock()
	if setup != nil {
		term := &termManager{Manager: base}
		if err := setup(term); err != nil {
			g.fail(fmt.Errorf("managed: building the leader-only runnables of epoch %d: %w", t.Epoch, err))
			return
		}
		runnables = append(runnables, term.runnables...)
	}
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
	if cause := context.Cause(ctx); setup == nil && !errors.Is(cause, elector.ErrReleased) {
		g.fail(fmt.Errorf("managed: leadership of %s lost: %w", t, cause))
	}
	wg.Wait()
}

// termManager is the manager a term's setup builds on (EachTerm): Add collects the term's leader-only
// runnables; controllers skip the name check, since every term builds the same ones again.
type termManager struct {
	manager.Manager
	runnables []manager.Runnable
}

func (m *termManager) Add(r manager.Runnable) error {
	if le, ok := r.(manager.LeaderElectionRunnable); ok && !le.NeedLeaderElection() {
		return fmt.Errorf("managed: a runnable that runs on every replica (%T) added in a term's setup: add it to the manager before it starts", r)
	}
	m.runnables = append(m.runnables, r)
	return nil
}

func (m *termManager) GetControllerOptions() config.Controller {
	o := m.Manager.GetControllerOptions()
	o.SkipNameValidation = ptr.To(true)
	return o
}

func (g *Gate) fail(err error) {
	select {
	case g.failed <- err:
	default:
	}
}
