package fencekit_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// elector binds the elector role to a new user in a new namespace and returns the namespace and the
// user's kubeconfig.
func electorUser(t *testing.T, user string) (string, string) {
	t.Helper()
	ns := env.Namespace(t)
	env.ElectorClient(t, ns, user)
	return ns, kubeconfigOf(t, user)
}

// TestTimeout: with the Lease held by another, --timeout ends the wait with exit status 75, naming the
// holder.
func TestTimeout(t *testing.T) {
	ns, kc := electorUser(t, "cli-timeout")
	other := env.NewWorker(t, ns, "someone-else")
	other.LeaseDuration = time.Hour
	other.Acquire(t, ns, "held", 1)
	r := run(t, nil, append([]string{"run", "--kubeconfig=" + kc, "--namespace=" + ns, "--lease=held", "--identity=a", "--timeout=1s"}, append(fast, "--", "true")...)...)
	want := fmt.Sprintf(`fencekit run: the Lease was not acquired in time: not leading Lease %s/held (held by "someone-else") after --timeout 1s`, ns)
	if r.code != 75 || lastLine(r.stderr) != want {
		t.Errorf("status %d, last line %q\nwant 75 and %q", r.code, lastLine(r.stderr), want)
	}
}

// start starts fencekit with args and env (added to this process's) in the background; done is closed
// when it has exited. Its stderr goes to a file (a pipe would keep Wait waiting for whatever leaked with
// it). It is killed at the end of the test.
func start(t *testing.T, env []string, args ...string) (cmd *exec.Cmd, stderr fmt.Stringer, done <-chan struct{}) {
	t.Helper()
	cmd = exec.Command(fencekit(t), args...)
	cmd.Env = append(os.Environ(), env...)
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	cmd.Stderr = f
	stderr = fileText(f.Name())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd, stderr, exited
}

// fileText prints as the file's content.
type fileText string

func (f fileText) String() string {
	b, _ := os.ReadFile(string(f))
	return string(b)
}

// pidIn waits until path holds a pid and returns it.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testenv.Eventually(t, "the command writes its grandchild's pid to "+path, func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil {
			return false, err.Error()
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, string(b)
	})
	t.Cleanup(func() {
		if procfs.Running(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL) // leaked: the test has failed already
		}
	})
	return pid
}

// exited waits until fencekit has exited.
func exited(t *testing.T, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("fencekit did not exit")
	}
}

// takeOver makes another elector the holder of the Lease at the next epoch, as an elector that saw the
// Lease expire would: the running fencekit loses it.
func takeOver(t *testing.T, key types.NamespacedName) {
	t.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(t.Context(), key, &l); err != nil {
		t.Fatal(err)
	}
	epoch, err := strconv.ParseInt(l.Annotations[protocol.EpochAnnotation], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	env.NewWorker(t, key.Namespace, "usurper").Acquire(t, key.Namespace, key.Name, epoch+1)
}

// TestSetsidGrandchildIsStopped: a grandchild that left the command's session with setsid, and whose
// parent exited, is stopped with the rest of the tree, both when the command exits on its own and when
// leadership is lost.
func TestSetsidGrandchildIsStopped(t *testing.T) {
	ns, kc := electorUser(t, "cli-tree")
	flags := append([]string{"run", "--kubeconfig=" + kc, "--namespace=" + ns, "--identity=a", "--grace=1s"}, fast...)

	t.Run("the command exits on its own", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "pid")
		// The intermediate shell exits at once: the setsid sleep is re-parented, and the command exits 0.
		script := `sh -c 'setsid sleep 1000 & echo $! > "$0"' "$MARKER"; sleep 0.5`
		cmd, stderr, done := start(t, []string{"MARKER=" + marker}, append(flags, "--lease=own", "--", "sh", "-c", script)...)
		grandchild := pidIn(t, marker)
		exited(t, done)
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("fencekit run exited %d, want the command's 0\n%s", code, stderr)
		}
		if procfs.Running(grandchild) {
			t.Errorf("the setsid grandchild %d still runs after fencekit run ended", grandchild)
		}
	})
	t.Run("leadership is lost", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "pid")
		script := `trap 'exit 143' TERM; sh -c 'setsid sh -c "trap \"\" TERM; exec sleep 1000" & echo $! > "$0"' "$MARKER"; while :; do sleep 0.1; done`
		cmd, stderr, done := start(t, []string{"MARKER=" + marker}, append(flags, "--lease=lost", "--", "sh", "-c", script)...)
		grandchild := pidIn(t, marker)
		takeOver(t, types.NamespacedName{Namespace: ns, Name: "lost"})
		exited(t, done)
		if code := cmd.ProcessState.ExitCode(); code != 137 {
			t.Fatalf("fencekit run exited %d, want 137 (SIGKILL at once: the Lease is another's)\n%s", code, stderr)
		}
		if procfs.Running(grandchild) {
			t.Errorf("the setsid grandchild %d still runs after leadership was lost", grandchild)
		}
	})
}

func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
}

// TestSidecarEndpoints: both sidecars on a Lease are ready (a rolling update's new pod turns ready while
// the old one leads); /leader is 200 on the leader only; a sidecar that cannot reach the apiserver is
// alive but not ready.
func TestSidecarEndpoints(t *testing.T) {
	ns, kc := electorUser(t, "cli-sidecar")
	flags := append([]string{"elect", "--kubeconfig=" + kc, "--namespace=" + ns, "--lease=orders"}, fast...)
	a, b := "http://"+freeAddr(t), "http://"+freeAddr(t)
	start(t, nil, append(flags, "--identity=pod-a", "--serve="+strings.TrimPrefix(a, "http://"))...)
	testenv.Eventually(t, "pod-a leads", func() (bool, string) {
		c := status(t, a+"/leader")
		return c == http.StatusOK, strconv.Itoa(c)
	})
	start(t, nil, append(flags, "--identity=pod-b", "--serve="+strings.TrimPrefix(b, "http://"))...)
	testenv.Eventually(t, "pod-b, the standby, is ready", func() (bool, string) {
		c := status(t, b+"/readyz")
		return c == http.StatusOK, strconv.Itoa(c)
	})
	for url, want := range map[string]int{a + "/readyz": 200, a + "/leader": 200, a + "/healthz": 200, b + "/leader": 503, b + "/healthz": 200} {
		if got := status(t, url); got != want {
			t.Errorf("GET %s = %d, want %d", url, got, want)
		}
	}

	// An apiserver that does not answer: the port of a listener that accepts nothing.
	dead := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(dead, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, freeAddr(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	c := "http://" + freeAddr(t)
	start(t, nil, append([]string{"elect", "--kubeconfig=" + dead, "--namespace=" + ns, "--lease=orders", "--identity=pod-c", "--serve=" + strings.TrimPrefix(c, "http://")}, fast...)...)
	testenv.Eventually(t, "pod-c serves", func() (bool, string) {
		code := status(t, c+"/healthz")
		return code == http.StatusOK, strconv.Itoa(code)
	})
	if got := status(t, c+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("the /readyz of a sidecar whose apiserver does not answer = %d, want 503", got)
	}
}
