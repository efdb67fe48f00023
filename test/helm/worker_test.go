package helm_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
	kubeconfigpkg "github.com/fencekit/fencekit/test/util/kubeconfig"
)

// kubeconfig writes a kubeconfig that authenticates as the admin and impersonates id, as a pod running as id
// would be authorized; the zero identity is the admin itself.
func kubeconfig(t *testing.T, id identity) string {
	t.Helper()
	return kubeconfigpkg.ForTest(t, id.config())
}

// runExampleWorker runs examples/worker (the reference worker users copy) as id, in namespace, until it has
// made writes accepted writes to the FencedResource resource bound to lease.
func runExampleWorker(t *testing.T, id identity, namespace, lease, resource string, writes int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "worker")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./examples/worker")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/worker: %v\n%s", err, out)
	}
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: namespace},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: lease}}
	if err := env.Client.Create(t.Context(), fr); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--namespace", namespace, "--lease", lease, "--resource", resource, "--identity", resource+"-worker-0",
		"--writes", itoa(int32(writes)), "--interval", "100ms",
		"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms", "--safety-margin", "200ms")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig(t, id))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	lines := make(chan map[string]any)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
	}()
	accepted := 0
	timeout := time.After(60 * time.Second)
	for accepted < writes {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("examples/worker exited after %d accepted writes, want %d", accepted, writes)
			}
			if m["msg"] == "write" {
				if accepted, _ := m["accepted"].(bool); !accepted {
					t.Fatalf("examples/worker, as %s bound to fencekit-elector: a write was refused: %v", id.user, m)
				}
				accepted++
			}
		case <-timeout:
			t.Fatalf("examples/worker, as %s bound to fencekit-elector, made %d of %d writes in 60 s", id.user, accepted, writes)
		}
	}
	// The Lease policy recorded who acquired: the ServiceAccount, not the admin whose certificate carries it.
	var l coordinationv1.Lease
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: lease}, &l); err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[protocol.AcquirerAnnotation]; got != id.user {
		t.Errorf("Lease %s was acquired by %q, want %q", lease, got, id.user)
	}
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: resource}, fr); err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if fr.Spec.Data == nil || json.Unmarshal(fr.Spec.Data.Raw, &data) != nil || data["write"] != float64(writes) {
		t.Errorf("FencedResource %s/%s holds %v, want the worker's write %d", namespace, resource, fr.Spec.Data, writes)
	}
}
