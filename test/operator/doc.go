// Package operator tests the operator's startup (internal/operator) on a real kube-apiserver and etcd with
// fencekit's admission (envtest with the webhooks and the Lease policy, through test/util/testenv), the
// operator started in the test process (test/util/operatortest): its election between two replicas and
// its metrics endpoint, secure and plain. What its webhooks admit and refuse is tested in test/admission;
// internal/operator's own tests are the ones that need no control plane (`make test-unit` runs them).
package operator
