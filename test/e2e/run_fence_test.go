package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/dev/demo"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestFencekitRunFencesManyAtDefaultQPS: `fencekit run --kubeconfig` builds its rest.Config with
// clientcmd, which keeps client-go's default client-side rate limit (5 QPS, burst 10), and runs its
// elector at every default timing (PostAcquireTimeout = RenewDeadline = 10 s). With 100 FencedResources
// bound to its Lease, the fence (1 list + 100 patches, through the operator's webhook) must still finish
// before the timeout: the command runs, with the epoch every resource was raised to. Through a client
// with the default limiter it needed about 18 s, so the command never ran.
func TestFencekitRunFencesManyAtDefaultQPS(t *testing.T) {
	t.Parallel()
	const lease, n = "run-bulk", 100
	ctx := t.Context()
	for i := range n {
		fr := &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Namespace: target.Namespace, Name: fmt.Sprintf("run-bulk-%03d", i), Labels: map[string]string{"e2e": lease}},
			Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: lease},
		}
		if err := target.Admin.Create(ctx, fr); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := demo.Build(testenv.RepoRoot(), t.TempDir(), "./cmd/fencekit")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	epochFile := filepath.Join(dir, "epoch")
	cmd := exec.Command(bin, "run", "--kubeconfig="+target.W1Kubeconfig, "--namespace="+target.Namespace,
		"--lease="+lease, "--identity=run-bulk", "--", "sh", "-c", `echo "$FENCEKIT_EPOCH" > "$OUT"`)
	cmd.Env = append(os.Environ(), "OUT="+epochFile)
	out, err := os.Create(filepath.Join(dir, "fencekit-run.out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The elector gives up on the fence after PostAcquireTimeout and competes again; this bound only keeps
	// a command that never runs from hanging the test.
	select {
	case err = <-done:
	case <-time.After(testenv.EventuallyTimeout + elector.DefaultLeaseDuration):
		_ = cmd.Process.Kill()
		<-done
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("fencekit run never ran its command with %d FencedResources bound to lease %s; its output:\n%s", n, lease, b)
	}
	if err != nil {
		b, _ := os.ReadFile(out.Name())
		t.Fatalf("fencekit run: %v; its output:\n%s", err, b)
	}
	raw, err := os.ReadFile(epochFile)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		t.Fatalf("the command saw FENCEKIT_EPOCH %q: %v", raw, err)
	}

	var list fencingv1alpha1.FencedResourceList
	if err := target.Admin.List(ctx, &list, client.InNamespace(target.Namespace), client.MatchingLabels{"e2e": lease}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != n {
		t.Fatalf("%d FencedResources bound to lease %s, want %d", len(list.Items), lease, n)
	}
	for _, fr := range list.Items {
		if fr.Spec.Epoch != epoch {
			t.Errorf("FencedResource %s is at epoch %d, want %d (the epoch fencekit run handed its command)", fr.Name, fr.Spec.Epoch, epoch)
		}
	}
}
