// Package attack is fencekit's automatic attacker, in the manner of Jepsen's generators and etcd's
// robustness tests: a seeded generator of tokenless, stale and forged writes against one fenced world on
// the real kube-apiserver and etcd (envtest), with fencekit's operator running in the test process.
//
// A run builds a world in a fresh namespace: a fenced Lease held by an elector (pkg/elector at its
// defaults, fence-on-acquire for FencedResources and objects), FencedResources bound to it with the
// holder's data, a FencingPolicy covering ConfigMaps (by label) and Pods, ConfigMaps and a Pod the holder
// wrote, and a ConfigMap owned by another (so that delete propagation is observable; the real
// kube-controller-manager's garbage collector runs next to the apiserver). Then each step of the seeded
// generator has one actor (a stale replica of the holder, another elector-role user, a user with RBAC on
// the objects only, a GitOps tool, cluster controller identities) send one write over one of the routes
// discovery lists for the covered resources (their subresources, and top-level resources of a
// subresource's kind, such as core bindings), with a random verb, field manager (forged tokens included),
// dry run, delete options and change (labels, annotations with fencekit's keys, finalizers, owner
// references, managedFields up to etcd's request limit, data, status, thousands of declarations, tight
// loops of free writes). After each step the invariants of docs/design/threat-model.md, allowlist.md and
// deletion.md are checked:
//
//   - I1 content: no write without the current token changed a fenced object's fenced content (data,
//     spec, epoch, coverage labels, fencekit's annotations, owner references, the orphan and
//     foregroundDeletion finalizers, its existence or deletion), compared with what the holder last wrote;
//   - I2 headroom: the holder's writes of every kind (server-side apply, merge patch, JSON patch, update,
//     Writer.Set, Writer.Delete, NewClient's Delete) still succeed;
//   - I3 acquisition: every few steps, and at the end, a new elector of the holder's user acquires with
//     fence-on-acquire at the elector's defaults and leads within LeaseDuration + RenewDeadline + slack,
//     and the previous holder's writes are then refused;
//   - I4 delete semantics: the holder's delete of an owner deletes its dependents, and no tokenless write
//     changes the propagation of a delete in progress.
//
// The seed is printed; every violation names the seed, the step, the actor, the route, the invariant and
// the steps that led to it, with the command that replays the run (-attack.seed, -attack.steps). Without
// flags the test is a short run with a fixed seed (make test); make attack runs it for ATTACK_DURATION.
package attack
