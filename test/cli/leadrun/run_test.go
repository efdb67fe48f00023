package leadrun_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/cli/leadrun"
	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// config is a short-timed elector config on a Lease of its own.
func config(t *testing.T, lease string) elector.Config {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return elector.Config{Client: cs, Namespace: env.Namespace(t), Name: lease, Identity: "runner-" + lease,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond,
		SafetyMargin: 200 * time.Millisecond}
}

func lease(t *testing.T, cfg elector.Config) *coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Name}, &l); err != nil {
		t.Fatal(err)
	}
	return &l
}

// TestRunGivesTheTokenAndReleases: the command sees the acquisition's token in its environment; when it
// exits 0, Run returns nil and the Lease is released.
func TestRunGivesTheTokenAndReleases(t *testing.T) {
	cfg := config(t, "env")
	out := filepath.Join(t.TempDir(), "env")
	script := `printf '%s\n%s\n%s\n%s\n' "$FENCEKIT_EPOCH" "$FENCEKIT_LEASE" "$FENCEKIT_HOLDER" "$FENCEKIT_FIELD_MANAGER" > "$OUT"`
	err := leadrun.Run(t.Context(), cfg, leadrun.Command{Args: []string{"sh", "-c", script}, Env: []string{"OUT=" + out}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	l := lease(t, cfg)
	epoch := l.Annotations[protocol.EpochAnnotation]
	want := strings.Join([]string{epoch, cfg.Namespace + "/" + cfg.Name, cfg.Identity, "fencing.fencekit.io/epoch=" + epoch}, "\n") + "\n"
	if string(b) != want {
		t.Errorf("the command saw\n%s\nwant\n%s", b, want)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("after the command exited, the Lease is still held by %q", h)
	}
}

// TestRunExitStatus: Run reports the command's own exit status.
func TestRunExitStatus(t *testing.T) {
	err := leadrun.Run(t.Context(), config(t, "status"), leadrun.Command{Args: []string{"sh", "-c", "exit 3"}})
	var ee *leadrun.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("Run = %v, want an ExitError with code 3", err)
	}
	err = leadrun.Run(t.Context(), config(t, "missing"), leadrun.Command{Args: []string{"/nonexistent/fencekit-cmd"}})
	if !errors.As(err, &ee) || ee.Code != 127 {
		t.Fatalf("Run of a missing command = %v, want an ExitError with code 127", err)
	}
	plain := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = leadrun.Run(t.Context(), config(t, "not-executable"), leadrun.Command{Args: []string{plain}})
	if !errors.As(err, &ee) || ee.Code != 126 {
		t.Fatalf("Run of a file that is not executable = %v, want an ExitError with code 126, as a shell reports it", err)
	}
}

// takeOver makes an admin the holder of the Lease at the next epoch, as a break-glass recovery would:
// the running elector loses leadership.
func takeOver(t *testing.T, cfg elector.Config) {
	t.Helper()
	l := lease(t, cfg)
	epoch, err := strconv.ParseInt(l.Annotations[protocol.EpochAnnotation], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations[protocol.EpochAnnotation] = strconv.FormatInt(epoch+1, 10)
	l.Spec.HolderIdentity = ptr.To("admin")
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if err := env.Client.Update(t.Context(), l, &client.UpdateOptions{FieldManager: protocol.FieldManagerFor(epoch + 1)}); err != nil {
		t.Fatal(err)
	}
}

// runUntilStarted runs cmd in the background and waits until it has written its marker file.
func runUntilStarted(t *testing.T, cfg elector.Config, script string, grace time.Duration) (marker string, result <-chan error) {
	t.Helper()
	dir := t.TempDir()
	marker = filepath.Join(dir, "marker")
	res := make(chan error, 1)
	go func() {
		res <- leadrun.Run(t.Context(), cfg, leadrun.Command{Args: []string{"sh", "-c", script}, Env: []string{"MARKER=" + marker}, Grace: grace})
	}()
	waitFile(t, marker)
	return marker, res
}

// waitFile waits until the command has written path.
func waitFile(t *testing.T, path string) {
	t.Helper()
	testenv.Eventually(t, "the command writes "+path, func() (bool, string) {
		_, err := os.Stat(path)
		return err == nil, fmt.Sprint(err)
	})
}

// exitAfterTakeover takes the Lease over from the running command's elector and returns how Run ended.
func exitAfterTakeover(t *testing.T, cfg elector.Config, res <-chan error) *leadrun.ExitError {
	t.Helper()
	takeOver(t, cfg)
	var err error
	select {
	case err = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after leadership was lost")
	}
	var ee *leadrun.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want an ExitError", err)
	}
	return ee
}

// TestTakenLeaseKillsTheCommandAtOnce: when another holder takes the Lease (it may run its own command
// now), the command gets SIGKILL at once, without SIGTERM's grace, and Run reports why it ended.
func TestTakenLeaseKillsTheCommandAtOnce(t *testing.T) {
	cfg := config(t, "lost")
	script := `trap 'echo term >> "$MARKER"; exit 143' TERM; echo started > "$MARKER"; while :; do sleep 0.1; done`
	marker, res := runUntilStarted(t, cfg, script, 10*time.Second)
	ee := exitAfterTakeover(t, cfg, res)
	if want := `killed with SIGKILL at once: leadership ended (elector: leadership lost: holder_changed: the Lease now names holder "admin")`; ee.Code != 137 || ee.Why != want {
		t.Fatalf("Run = %v (code %d), want an ExitError 137: %s", ee, ee.Code, want)
	}
	if b, _ := os.ReadFile(marker); string(b) != "started\n" {
		t.Errorf("the command's marker is %q, want no SIGTERM seen", b)
	}
}

// TestCommandIgnoringSIGTERMIsKilled: Run's context cancelled (fencekit run got SIGTERM), a command that
// ignores SIGTERM is killed after the grace period, its children too (its process group).
func TestCommandIgnoringSIGTERMIsKilled(t *testing.T) {
	cfg := config(t, "stubborn")
	script := `trap '' TERM; sleep 1000 & echo $! > "$MARKER"; wait`
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	marker := filepath.Join(t.TempDir(), "marker")
	res := make(chan error, 1)
	go func() {
		res <- leadrun.Run(ctx, cfg, leadrun.Command{Args: []string{"sh", "-c", script}, Env: []string{"MARKER=" + marker}, Grace: 500 * time.Millisecond})
	}()
	waitFile(t, marker)
	cancel()
	var ee *leadrun.ExitError
	if err := <-res; !errors.As(err, &ee) || ee.Code != 137 || !strings.HasPrefix(ee.Why, "killed with SIGKILL 500ms after SIGTERM: ") {
		t.Fatalf("Run = %v, want an ExitError 137 saying SIGKILL 500ms after SIGTERM", err)
	}
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the command's marker %q is not a pid: %v", b, err)
	}
	// Gone, or a zombie waiting for a parent that does not reap it: either way it runs no more.
	testenv.Eventually(t, fmt.Sprintf("the command's child %d is gone", child), func() (bool, string) {
		return !procfs.Running(child), ""
	})
}

// TestCancelStopsTheCommandAndReleases: cancelling Run (fencekit run got SIGTERM) stops the command and
// releases the Lease.
func TestCancelStopsTheCommandAndReleases(t *testing.T) {
	cfg := config(t, "cancel")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "marker")
	res := make(chan error, 1)
	go func() {
		res <- leadrun.Run(ctx, cfg, leadrun.Command{Args: []string{"sh", "-c", `echo started > "$MARKER"; exec sleep 1000`}, Env: []string{"MARKER=" + marker}})
	}()
	waitFile(t, marker)
	cancel()
	err := <-res
	var ee *leadrun.ExitError
	if !errors.As(err, &ee) || ee.Code != 143 {
		t.Fatalf("Run = %v, want the command stopped with SIGTERM (143)", err)
	}
	if h := ptr.Deref(lease(t, cfg).Spec.HolderIdentity, ""); h != "" {
		t.Errorf("after cancel, the Lease is still held by %q", h)
	}
}

// TestGraceEndsAtTheSafeWorkDeadline: the Lease is not renewed while the command stops, so a grace longer
// than what is left of the term ends at the safe-work deadline of the last renewal (here under 2 s, the
// Lease's duration), before the Lease can expire; then the Lease is released.
func TestGraceEndsAtTheSafeWorkDeadline(t *testing.T) {
	cfg := config(t, "long-grace")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	marker := filepath.Join(t.TempDir(), "marker")
	res := make(chan error, 1)
	go func() {
		res <- leadrun.Run(ctx, cfg, leadrun.Command{Args: []string{"sh", "-c", `trap '' TERM; echo started > "$MARKER"; exec sleep 1000`}, Env: []string{"MARKER=" + marker}, Grace: time.Minute})
	}()
	waitFile(t, marker)
	cancel()
	var ee *leadrun.ExitError
	if err := <-res; !errors.As(err, &ee) || ee.Code != 137 || !strings.Contains(ee.Why, " after SIGTERM, at the safe-work deadline, before its grace of 1m0s ended: leadership ended") {
		t.Fatalf("Run = %v, want an ExitError 137 saying SIGKILL at the safe-work deadline", err)
	}
	if h := ptr.Deref(lease(t, cfg).Spec.HolderIdentity, ""); h != "" {
		t.Errorf("after the command was killed, the Lease is still held by %q", h)
	}
}

// TestAgainRunsTheCommandOnEachNewTerm: with Command.Again, a Lease taken by another holder stops the
// command (SIGKILL at once) and Run stands by; once that holder's Lease expires it acquires again and runs
// the command anew with the new term's epoch, twice here, never two at once; when the command then exits
// on its own, Run returns its status and releases the Lease.
func TestAgainRunsTheCommandOnEachNewTerm(t *testing.T) {
	cfg := config(t, "again")
	dir := t.TempDir()
	log, stop := filepath.Join(dir, "epochs"), filepath.Join(dir, "stop")
	// Each run appends its epoch and its pid; the third run exits 3 at once.
	script := `echo "$FENCEKIT_EPOCH $$" >> "$LOG"; [ "$(wc -l < "$LOG")" -ge 3 ] && exit 3; while [ ! -e "$STOP" ]; do sleep 0.05; done`
	res := make(chan error, 1)
	go func() {
		res <- leadrun.Run(t.Context(), cfg, leadrun.Command{Args: []string{"sh", "-c", script}, Env: []string{"LOG=" + log, "STOP=" + stop}, Again: true})
	}()
	runs := func() []string {
		b, _ := os.ReadFile(log)
		return strings.Fields(string(b))
	}
	for n := 1; n <= 2; n++ {
		testenv.Eventually(t, fmt.Sprintf("run %d of the command", n), func() (bool, string) { return len(runs()) == 2*n, fmt.Sprint(runs()) })
		takeOver(t, cfg)
		select {
		case err := <-res:
			t.Fatalf("Run returned %v after the Lease was taken, want it to stand by", err)
		default:
		}
	}
	var err error
	select {
	case err = <-res:
	case <-time.After(30 * time.Second):
		t.Fatalf("Run did not return after the third run of the command exited; runs: %v", runs())
	}
	var ee *leadrun.ExitError
	if !errors.As(err, &ee) || ee.Code != 3 {
		t.Fatalf("Run = %v, want the third run's exit status 3", err)
	}
	r := runs()
	if len(r) != 6 {
		t.Fatalf("runs (epoch, pid): %v, want 3", r)
	}
	// Each run's epoch is above the last one's and the admin's takeover (one each).
	for i := 2; i < len(r); i += 2 {
		prev, _ := strconv.ParseInt(r[i-2], 10, 64)
		cur, _ := strconv.ParseInt(r[i], 10, 64)
		if cur < prev+2 {
			t.Errorf("run %d at epoch %d after run %d at epoch %d and a takeover at %d: want a new acquisition's epoch", i/2+1, cur, i/2, prev, prev+1)
		}
		// The earlier run's process is gone before the next one starts: it no longer runs now.
		if pid, _ := strconv.Atoi(r[i-1]); procfs.Running(pid) {
			t.Errorf("run %d's process %d still runs", i/2, pid)
		}
	}
	if h := ptr.Deref(lease(t, cfg).Spec.HolderIdentity, ""); h != "" {
		t.Errorf("after the command exited, the Lease is still held by %q", h)
	}
}
