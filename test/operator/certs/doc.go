// Package certs tests the operator's webhook certificates (internal/operator/certs) on a real
// kube-apiserver and etcd (envtest, one control plane for the package, through test/util/testenv): the
// rotator issues, injects, serves and renews them, replicas agree on one CA, and the cert directory's
// files are swapped at once and followed by controller-runtime's certwatcher.
package certs
