// Package elector tests pkg/elector on a real kube-apiserver and etcd (envtest, one control plane for the
// package, through test/util/testenv) with fencekit's Lease policy installed: handover on release and on
// crash, restarts with the same identity, the Lease deleted or edited by hand, acquisition races, a
// partitioned leader, a hung request, the apiserver restarted mid-lease, the policy's rules on epochs,
// owners and fence-on-acquire declarations, and the metrics registry. pkg/elector's own tests are the ones
// that need no control plane (`make test-unit` runs them).
package elector
