// Package leasepolicy tests fencekit's Lease policy (config/policy/lease_policy.yaml, the
// ValidatingAdmissionPolicy on fenced coordination.k8s.io Leases) on a real kube-apiserver and etcd
// (envtest, one control plane for the package, through test/util/testenv), without the operator:
// kube-apiserver alone enforces it. Workers bound to the fencekit-elector role write Leases by hand, and
// each rule refuses with its message: an acquisition raises the epoch by exactly one (a create chooses it)
// and names its requester as acquirer, only the acquirer renews or releases its epoch, a write that
// acquires, renews or releases presents its epoch in the request, an epoch is a decimal integer in
// [1, 2^53-1], a Lease without a trusted epoch is acquired at its resourceVersion, the fence-on-acquire
// declaration changes only in an acquisition and is never dropped, a Lease becomes fenced only without
// ownerReferences and only the garbage collector may then remove one, and break glass (system:masters) may
// write anything. The policy's audit annotations reach the apiserver's audit log, on a control plane of
// their own with an audit policy.
package leasepolicy
