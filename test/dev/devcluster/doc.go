// Package devcluster tests the dev cluster of `make run` (internal/dev/devcluster) as make run starts it:
// fencekit-dev and the manager are built and run as processes, fencekit-dev starts the local control plane
// (kube-apiserver and etcd from hack/control-plane.sh) with the CRDs and admission installed, and the
// manager's webhook then refuses an unfenced write of an object a FencingPolicy declares.
package devcluster
