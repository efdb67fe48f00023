// Package chaos is fencekit's fault-injection and adversary suite with a history checker.
//
// A run starts real worker processes (test/chaos/worker) that compete for one Lease and, while they lead,
// write one target, each through its own in-process TCP proxy to a real kube-apiserver with fencekit's
// CRD, Lease policy and webhook (the operator in process, behind a proxy of its own). A seeded Schedule
// injects faults (F1 SIGKILL, F2 SIGTERM, F3 the zombie, F4 partition, F5 slow apiserver, F6 and F7
// kube-apiserver and etcd restarts, F8 clock-rate skew of the electors, F9 CPU starvation, F10 webhook slow
// or down, F11 webhook certificate rotation, F12 adversarial writers); the same seed gives the same
// schedule.
//
// Every attempted write, fence and read is recorded by its client as JSON lines (call, return, outcome,
// what it believed); a privileged Observer records every version of the Lease and the target from a
// watch, in resourceVersion order: the ground truth. Check then holds a run to fencekit's claim:
//
//   - the target's admitted epochs never decrease in resourceVersion order;
//   - every persisted data write came from the acquirer and holder of its epoch, after the acquisition,
//     while the Lease was at that epoch (or in the one window the design allows: admitted against the
//     Lease, stored after an acquisition and before fence-on-acquire raised the target), never from an
//     adversary or from nowhere;
//   - every write its client saw acknowledged is in the ground truth, and none it saw refused is;
//   - the target is linearizable as a fenced register (porcupine), with the HTML visualization of a
//     failing history written next to it.
//
// The negative control runs the same workload on client-go's leaderelection and a ConfigMap: the checker
// must flag it whenever a zombie (F3) ran. Histories stay on disk, so a failed run can be read and
// checked again (-chaos.replay). docs/reliability.md has the results and what the suite does not cover.
package chaos
