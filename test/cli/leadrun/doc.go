// Package leadrun tests internal/cli/leadrun, what fencekit run and fencekit elect do, on a real
// kube-apiserver and etcd (envtest, one control plane for the package, through test/util/testenv): Run
// gives the command its term's token, stops it when the term ends (at once when another holder takes the
// Lease, after a grace that ends at the safe-work deadline when cancelled) and releases the Lease; the
// Sidecar publishes the leader's token. leadrun's own tests are the ones that need no control plane
// (`make test-unit` runs them).
package leadrun
