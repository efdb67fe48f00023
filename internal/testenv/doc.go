// Package testenv starts one real control plane (kube-apiserver and etcd, through controller-runtime's
// envtest) per test package, with fencekit's CRDs installed and, when asked, its admission webhook
// configuration ready to be served by the test process.
//
// The binaries come from hack/control-plane.sh, which builds them from the Go module proxy on first use and
// caches them outside the repository. A test never skips because they are missing: if KUBEBUILDER_ASSETS is
// unset, Start runs the script and waits for the build.
package testenv
