// Package controllers tests the operator's reconcilers (controllers) on a real kube-apiserver and etcd
// with fencekit's admission (envtest with the webhooks and the Lease policy, through test/util/testenv)
// and the operator started in the test process (test/util/operatortest): a FencedResource's status
// follows its Lease and coalesces under sustained writes, the Lease finalizer, refusals reported as Events
// and counted, and the operator working with its own RBAC and nothing more. The reconcilers' own tests are
// the ones that need no control plane (`make test-unit` runs them).
package controllers
