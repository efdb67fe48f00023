package managed

import "sigs.k8s.io/controller-runtime/pkg/manager"

// Manager returns mgr as the builders of leader-only work should see it: runnables that need leader
// election (controllers, and any runnable that does not say otherwise, as controller-runtime decides) are
// added to the gate and run only while this replica leads; the others (webhook servers, runnables whose
// NeedLeaderElection is false) go to mgr and run on every replica. Add the gate itself to mgr.
//
//	gate, _ := managed.NewGate(elector.Config{...})
//	_ = mgr.Add(gate)
//	_ = ctrl.NewControllerManagedBy(gate.Manager(mgr)).For(&v1.Foo{}).Complete(r) // leader only
func (g *Gate) Manager(mgr manager.Manager) manager.Manager {
	return gatedManager{Manager: mgr, gate: g}
}

type gatedManager struct {
	manager.Manager
	gate *Gate
}

func (m gatedManager) Add(r manager.Runnable) error {
	if le, ok := r.(manager.LeaderElectionRunnable); ok && !le.NeedLeaderElection() {
		return m.Manager.Add(r)
	}
	return m.gate.Add(r)
}
