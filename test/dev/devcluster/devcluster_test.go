package devcluster_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	fkscheme "github.com/fencekit/fencekit/internal/scheme"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestMakeRunFencesObjects runs `fencekit-dev devcluster --manager bin/manager` as `make run` does (real
// processes) and declares a FencingPolicy: the manager finds the webhook configuration the local control
// plane installed, and an unfenced write of a declared ConfigMap is refused.
func TestMakeRunFencesObjects(t *testing.T) {
	root, dir := testenv.RepoRoot(), t.TempDir()
	for _, b := range []string{"fencekit-dev", "manager"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, b), "./cmd/"+b)
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building cmd/%s: %v\n%s", b, err, out)
		}
	}
	cmd := exec.Command(filepath.Join(dir, "fencekit-dev"), "devcluster", "--repo", root, "--manager", filepath.Join(dir, "manager"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Ctrl-C (SIGINT) stops the manager and the control plane; devcluster then exits 0, so `make run` does.
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("fencekit-dev devcluster: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("fencekit-dev devcluster did not stop within 30s of SIGINT")
		}
	})
	kubeconfig := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if k, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export KUBECONFIG="); ok {
				kubeconfig <- k
			}
		}
	}()
	var path string
	select {
	case path = <-kubeconfig:
	case <-time.After(5 * time.Minute):
		t.Fatal("fencekit-dev devcluster printed no KUBECONFIG in 5 minutes")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: fkscheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "app-writer", Resources: []fencingv1alpha1.FencedObjects{{Group: "", Resource: "configmaps",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}}}}}
	testenv.EventuallyWithin(t, time.Minute, "the FencingPolicy is admitted (the manager's webhook serves)", func() (bool, string) {
		err := c.Create(t.Context(), p.DeepCopy())
		return err == nil, errorString(err)
	})
	testenv.EventuallyWithin(t, time.Minute, "an unfenced write of a declared ConfigMap is refused", func() (bool, string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "state", Labels: map[string]string{"app": "fenced"}}}
		err := c.Create(t.Context(), cm)
		return fencing.IsTokenMissing(err), errorString(err)
	})
}

func errorString(err error) string {
	if err == nil {
		return "admitted"
	}
	return err.Error()
}
