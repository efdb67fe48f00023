// Package cluster runs fencekit next to the cluster's own controllers: the real kube-controller-manager
// (every controller, each with its own kube-system ServiceAccount, as on a real cluster) against the local
// control plane, with fencekit's operator, webhook and Lease policy installed. It asserts what a user
// would see: Deployments declared in a FencingPolicy roll out (examples/controller's too, run as its own
// process), the garbage collector deletes and orphans fenced objects, a namespace holding fenced objects
// and a live Lease finishes terminating, each resource a policy may declare gets the outcome
// docs/design/cluster-controllers.md decides for it, and stale writes are refused through a second
// kube-apiserver on the same etcd. Every test that declares a policy also shows a stale holder refused in
// its namespace (Holder.TakeOver).
//
// One control plane and one kube-controller-manager serve the whole package; each test has its own
// namespace and runs the operator itself. Under a single credential, kube-controller-manager runs in
// package onecredential, on a control plane of its own; the package's non-test files (Holder, RolledOut,
// the test objects) are the helpers both packages' tests use. The suite takes about a minute on 2 cores.
package cluster
