// Package fencekit tests the fencekit CLI (cmd/fencekit) as its users run it: it builds the binary once and
// runs it as a process against a real kube-apiserver and etcd with fencekit's Lease policy (envtest, one
// control plane for the package, through test/util/testenv): usage errors and their exit status, help and
// version, permanent errors, --timeout, the stop of a command's whole process tree, and the token
// sidecar's endpoints.
package fencekit
