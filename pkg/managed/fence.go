package managed

import (
	"errors"
	"fmt"
	"reflect"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
// Keep SetupWithManager as it is; build the manager with NewManager (which refuses the manager's own
// leader election) or with ctrl.NewManager and LeaderElection off:
//
//	mgr, err := managed.NewManager(cfg, ctrl.Options{Scheme: scheme}, elector.Config{Namespace: ns, Name: "my-operator"})
//	err = (&MyReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
//	err = mgr.Start(ctx)
//
// Fence refuses a controller-runtime manager whose own leader election is on (manager.Options.LeaderElection,
// kubebuilder's --leader-elect): the operator would run two elections, and its controllers would wait for
// both.
//
// The objects are fenced in the apiserver by a FencingPolicy naming the same Lease. By default
// cfg.PostAcquire is fencing.FenceObjectsOnAcquireForConfig(mgr.GetConfig()): before leadership is reported,
// every object a FencingPolicy binds to the Lease is raised to the new epoch (by a client of its own without
// client-side rate limiting, so that one patch per object fits in the PostAcquire timeout whatever QPS mgr's
// config has), and the Lease declares it, so that fencekit's webhook admits the fenced writes from its copy of
// the Lease instead of a quorum read per write. The elector's user needs list on fencingpolicies
// (config/rbac/elector_role.yaml) and list and patch on the declared objects. Set cfg.PostAcquire to replace
// the default: another fence from pkg/fencing (elector.JoinFences to fence FencedResources too), or
// elector.AcquireHook(nil) to fence nothing on acquire (every fenced write then costs the webhook a quorum
// read of the Lease, and a paused former holder's write is refused only once the new holder has written
// the object).
func Fence(mgr manager.Manager, cfg elector.Config, opts ...elector.Option) (manager.Manager, error) {
	if ownElection(mgr) {
		return nil, errors.New("managed: the manager runs its own leader election (manager.Options.LeaderElection is true, " +
			"kubebuilder's --leader-elect): fencekit's elector replaces it; build the manager with LeaderElection false, " +
			"or with managed.NewManager")
	}
	if cfg.Client == nil {
		cs, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("managed: a clientset for the elector: %w", err)
		}
		cfg.Client = cs
	}
	if cfg.PostAcquire.IsZero() {
		fence, err := fencing.FenceObjectsOnAcquireForConfig(mgr.GetConfig())
		if err != nil {
			return nil, fmt.Errorf("managed: the fence-on-acquire for lease %s/%s: %w", cfg.Namespace, cfg.Name, err)
		}
		cfg.PostAcquire = fence
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

// FenceEachTerm is Fence for an operator that steps back when it loses its Lease instead of stopping:
// setup builds the leader-only controllers (SetupWithManager) on the manager it is given, at the start
// of each term (Gate.EachTerm). When leadership is lost (a pause past the lease, an apiserver out of
// reach past RenewDeadline, another holder), the term's controllers stop, the process keeps serving
// webhooks, probes and metrics and keeps its informers' caches, and the elector competes again; the next
// term builds the controllers anew and they reconcile at the new epoch. A write of the ended term is
// refused by the fenced client once its token is gone (fencing.ErrNoToken, sent nowhere) and, if it was
// already on its way, at the resource, which has admitted the new epoch. The returned manager's Add
// refuses leader-only runnables: build them in setup. Fence (which stops the manager on loss, so that
// the pod restarts) stays for operators that prefer a restart.
//
//	mgr, err = managed.FenceEachTerm(mgr, elector.Config{Namespace: ns, Name: "my-operator"}, func(m manager.Manager) error {
//		return (&MyReconciler{Client: m.GetClient()}).SetupWithManager(m)
//	})
func FenceEachTerm(mgr manager.Manager, cfg elector.Config, setup func(manager.Manager) error, opts ...elector.Option) (manager.Manager, error) {
	fenced, err := Fence(mgr, cfg, opts...)
	if err != nil {
		return nil, err
	}
	if err := GateOf(fenced).EachTerm(fenced, setup); err != nil {
		return nil, err
	}
	return fenced, nil
}

// NewManager is ctrl.NewManager for an operator that fencekit elects: it refuses opts.LeaderElection (the
// manager's own election, which fencekit's elector replaces), builds the manager from cfg and opts, and
// returns Fence(mgr, ecfg, eopts...).
func NewManager(cfg *rest.Config, opts manager.Options, ecfg elector.Config, eopts ...elector.Option) (manager.Manager, error) {
	if opts.LeaderElection {
		return nil, fmt.Errorf("managed: manager.Options.LeaderElection is true (LeaderElectionID %q): fencekit's elector "+
			"(lease %s/%s) replaces the manager's own election; set LeaderElection to false (kubebuilder's --leader-elect flag)",
			opts.LeaderElectionID, ecfg.Namespace, ecfg.Name)
	}
	mgr, err := manager.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	return Fence(mgr, ecfg, eopts...)
}

// ownElection reports whether mgr is controller-runtime's manager with its own leader election on. The
// manager does not expose its Options: manager.New keeps a resource lock (field resourceLock) exactly when
// LeaderElection is true, and this reads whether it is set. TestFenceRefusesTheManagersOwnElection holds it
// to the controller-runtime version in go.mod. A manager of another type (a wrapper) is not inspected.
func ownElection(mgr manager.Manager) bool {
	if g, ok := mgr.(gatedManager); ok {
		mgr = g.Manager
	}
	v := reflect.ValueOf(mgr)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	f := v.Elem().FieldByName("resourceLock")
	return f.IsValid() && f.Kind() == reflect.Interface && !f.IsNil()
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
