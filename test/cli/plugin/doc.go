// Package plugin tests the kubectl plugin's commands (internal/cli/plugin) on a real kube-apiserver and
// etcd with fencekit's admission (envtest with the webhooks and the Lease policy, through
// test/util/testenv) and the operator started in the test process (test/util/operatortest): status lists
// a Lease, the resources bound to it and their refusals; each verdict of explain is checked against the
// apiserver's own answer to the same write sent as a dry run.
package plugin
