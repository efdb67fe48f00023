package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/dev/demo"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestFencekitRunWithoutFenceOnDeclaredLease: `fencekit run` (fence-on-acquire by default) declares on its
// Lease that every acquisition fences the FencedResources; once it has, `fencekit run
// --fence-on-acquire=false` may not take the Lease (the Lease policy refuses an acquisition that drops
// the declaration). What its user sees: each retry logs the refusal, which names the Lease, the
// declaration and the flag to use; after 3 refusals it exits with status 78 (setup), and the command
// never runs.
func TestFencekitRunWithoutFenceOnDeclaredLease(t *testing.T) {
	t.Parallel()
	const lease = "run-nofence"
	bin, err := demo.Build(testenv.RepoRoot(), t.TempDir(), "./cmd/fencekit")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := func(identity string, extra ...string) []string {
		return append([]string{"run", "--kubeconfig=" + target.W1Kubeconfig, "--namespace=" + target.Namespace, "--lease=" + lease,
			"--identity=" + identity, "--lease-duration=2s", "--renew-deadline=1500ms", "--retry-period=300ms", "--safety-margin=200ms"}, extra...)
	}
	if out, err := exec.Command(bin, append(args("declares"), "--", "true")...).CombinedOutput(); err != nil {
		t.Fatalf("fencekit run with fence-on-acquire: %v\n%s", err, out)
	}

	ran := filepath.Join(dir, "ran")
	cmd := exec.Command(bin, append(args("no-fence", "--fence-on-acquire=false"), "--", "sh", "-c", `touch "$RAN"`)...)
	cmd.Env = append(os.Environ(), "RAN="+ran)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("fencekit run --fence-on-acquire=false's output:\n%s", out.String())
		}
	})
	want := []string{`fenced lease ` + lease + ` declares that every acquisition fences its FencedResources (annotation fencing.fencekit.io/fences=fencedresources)`,
		`only an elector that fences them on acquire may take it`, `fencekit run and fencekit elect: --fence-on-acquire, the default`}
	var exit *exec.ExitError
	select {
	case err := <-done:
		done <- err
		if !errors.As(err, &exit) || exit.ExitCode() != 78 {
			t.Fatalf("fencekit run --fence-on-acquire=false ended with %v, want exit status 78", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("fencekit run --fence-on-acquire=false retries a permanent refusal for ever")
	}
	s := out.String()
	for _, w := range append(want, "fencekit run: cannot elect on Lease "+target.Namespace+"/"+lease+": refused by admission") {
		if !strings.Contains(s, w) {
			t.Errorf("its output lacks %q", w)
		}
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the command ran (%v) on a Lease this elector could not acquire", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and the test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
