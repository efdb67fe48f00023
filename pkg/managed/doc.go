// Package managed runs a fencekit elector inside a controller-runtime manager.
//
// A Gate is a manager.Runnable that does not need the manager's own leader election
// (NeedLeaderElection() == false), so it starts on every replica. It runs the elector and, while the
// elector leads, runs the leader-only runnables added to it with Gate.Add, each with the leadership
// context: they stop when the safe-work deadline passes or leadership ends. Webhooks, probes and any
// runnable added to the manager directly keep serving on every replica.
//
//	gate, err := managed.NewGate(elector.Config{Client: cs, Namespace: ns, Name: "my-operator"})
//	_ = ctrl.NewControllerManagedBy(gate.Manager(mgr)).For(&v1.Foo{}).Complete(r) // a leader-only controller
//	_ = gate.Add(myLeaderOnlyRunnable)     // a leader-only runnable
//	_ = mgr.Add(gate)                  // with the manager's LeaderElection off
//
// Fence (or NewManager, which also builds the manager) is the one-line form: a gate, a fenced GetClient,
// and fence-on-acquire of the objects FencingPolicies declare, declared on the Lease. Both refuse a manager
// that runs its own leader election. The elector's metrics go to controller-runtime's metrics.Registry.
//
// When leadership is lost (not released), Start returns an error: the manager stops and the pod restarts,
// as controller-runtime does when its own election is lost (controllers cannot be started twice), unless
// the gate builds its leader-only runnables anew for each term (Gate.EachTerm, FenceEachTerm): then the
// term's runnables stop, the process keeps its caches and stands by, and the next term builds and starts
// them again at its epoch. When
// the manager's context ends, the gate ends the leadership context, waits (up to the elector's
// ReleaseTimeout) for the runnables to return, releases the Lease and returns nil.
package managed
