// Package testenv starts one real control plane (kube-apiserver and etcd, through controller-runtime's
// envtest) per test package, with fencekit's CRDs installed and, when asked, its Lease policy and its
// admission webhook configuration ready to be served by the test process. It is the one home of the tests'
// helpers: users and workers, declarations, polling.
//
// It never starts the operator, so that the public packages' tests (api/, pkg/) can use it without linking
// the operator (docs/design/imports.md, checked by hack/importcheck). Tests that need the running
// operator start it with test/util/operatortest.
//
// The binaries come from hack/control-plane.sh, which builds them from the Go module proxy on first use and
// caches them outside the repository. A test never skips because they are missing: if KUBEBUILDER_ASSETS is
// unset, Start runs the script and waits for the build.
package testenv
