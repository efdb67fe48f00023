// Package api tests api/v1alpha1 on a real kube-apiserver and etcd with fencekit's CRDs (envtest, one
// control plane for the package, through test/util/testenv; no operator, so no webhook): the
// FencedResource schema and its CEL rules reject on their own, and FencedResources can be listed by the
// Lease they are bound to.
package api
