package devcluster

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// AssetsDir returns the directory holding kube-apiserver and etcd: $KUBEBUILDER_ASSETS if set, otherwise the
// cache filled by hack/control-plane.sh, which this runs (building the binaries if they are absent, with its
// progress on stderr).
func AssetsDir(repoRoot string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	script := filepath.Join(repoRoot, "hack", "control-plane.sh")
	cmd := exec.Command(script)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("providing the control plane with %s: %w", script, err)
	}
	return strings.TrimSpace(out.String()), nil
}
