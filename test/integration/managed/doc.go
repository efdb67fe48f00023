// Package managed tests pkg/managed on a real kube-apiserver and etcd (envtest, one control plane
// for the package, through test/util/testenv): the Gate runs leader-only runnables on the leader only and
// returns an error when leadership is lost, and Fence gates a controller-runtime manager's writes on the
// token, refuses the manager's own leader election and logs through the manager's logger.
package managed
