// Package fencing tests pkg/fencing on a real kube-apiserver and etcd with fencekit's CRDs (envtest, one
// control plane for the package, through test/util/testenv; no operator, so no webhook): the CRD's own rule
// refusing a stale epoch is read as one, a Writer's Set sends one request, a write without an answer is
// abandoned, and the fence-on-acquire hooks built from a rest.Config raise 100 resources within the
// elector's default PostAcquire timeout. pkg/fencing's own tests are the ones that need no control plane
// (`make test-unit` runs them); those of the Writer against the running operator's webhook are in
// test/admission.
package fencing
