package managed

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// Fence is the one-line opt-in for a controller-runtime operator: it elects with a fencekit elector
// (configured by cfg and opts; cfg.Client defaults to a clientset for mgr's rest.Config, the logger to
// mgr's logger named "elector", unless opts set elector.WithLogger) and returns mgr
// as the operator's builders should see it:
//
//   - runnables that need leader election (controllers, and any runnable that does not say otherwise)
//     run only while this replica leads, under the leadership context (they stop at the safe-work
//     deadline); webhooks, metrics and probes run on every replica, as controller-runtime does;
//   - GetClient returns a fenced client (fencing.NewClient with the elector's current token): every write
//     of every reconciler presents the token, stamps the object's epoch record and deletes through the
//     deletion marker, and fails with fencing.ErrNoToken without sending once the token is gone.
//
// Keep ctrl.NewManager (with its own LeaderElection off) and SetupWithManager as they are:
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme})
//	mgr, err = managed.Fence(mgr, elector.Config{Namespace: ns, Name: "my-operator"})
//	err = (&MyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
//	err = mgr.Start(ctx)
//
// The objects are fenced in the apiserver by a FencingPolicy naming the same Lease. Set cfg.PostAcquire to
// the hook fencing.FenceObjectsOnAcquireForConfig(mgr.GetConfig()) returns to raise every declared object to
// the new epoch before leadership is reported, as fencing.FenceOnAcquireForConfig does for FencedResources:
// its own client has no client-side rate limit, so one patch per object fits in the PostAcquire timeout
// whatever QPS mgr's config has. Set cfg.PostAcquireFences to elector.Fences{Objects: true} with it, so that
// the Lease declares it and fencekit's webhook admits the fenced writes from its copy of the Lease instead
// of a quorum read per write.
func Fence(mgr manager.Manager, cfg elector.Config, opts ...elector.Option) (manager.Manager, error) {
	if cfg.Client == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("managed: a clientset for the elector: %w", err)
		}
		cfg.Client = cs
	}
	// The manager starts the gate with a context that carries no logger: without this the elector would log
	// through klog's global logger, not the manager's.
	opts = append([]elector.Option{elector.WithLogger(mgr.GetLogger().WithName("elector"))}, opts...)
	gate, err := NewGate(cfg, opts...)
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(gate); err != nil {
		return nil, err
	}
	return fencedManager{
		gatedManager: gatedManager{Manager: mgr, gate: gate},
		client:       fencing.NewClient(mgr.GetClient(), gate.Elector().Token),
	}, nil
}

// GateOf returns the Gate of a manager returned by Fence (for its Elector), nil for any other manager.
func GateOf(mgr manager.Manager) *Gate {
	if f, ok := mgr.(fencedManager); ok {
		return f.gate
	}
	return nil
}

type fencedManager struct {
	gatedManager
	client client.Client
}

// GetClient returns the fenced client.
func (m fencedManager) GetClient() client.Client { return m.client }
