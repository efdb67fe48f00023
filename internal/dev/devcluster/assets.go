package devcluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// AssetsDir returns the directory holding kube-apiserver and etcd (and kube-controller-manager if
// controllerManager): $KUBEBUILDER_ASSETS if set, otherwise the cache filled by hack/control-plane.sh, which
// this runs (building the binaries if they are absent, with its progress on stderr). The demo and the dev
// cluster run no kube-controller-manager, so a newcomer's first `make demo` does not build it.
func AssetsDir(repoRoot string, controllerManager bool) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	script := filepath.Join(repoRoot, "hack", "control-plane.sh")
	var args []string
	if !controllerManager {
		args = append(args, "--no-controller-manager")
	}
	cmd := exec.Command(script, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("providing the control plane with %s: %w", script, err)
	}
	return strings.TrimSpace(out.String()), nil
}
