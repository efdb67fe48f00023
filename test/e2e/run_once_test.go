package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/procfs"
)

// commandsOf lists the processes whose command line is exactly want.
func commandsOf(want []string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		if args, err := procfs.Cmdline(pid); err == nil && slices.Equal(args, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestFencekitRunOneCommandAtATime runs `fencekit run` (the real binary, the elector at its default timings)
// with a command that ignores SIGTERM, at --grace 2 s, 5 s and 20 s, beside a standby `fencekit run` of the
// same Lease and command, and ends the first's term two ways: SIGTERM to `fencekit run`, and leadership
// lost (an admin gives the Lease to another holder, who lets it lapse after a second). Every 20 ms it
// reads /proc and the Lease: never two commands of the Lease at once. Under SIGTERM the command gets
// SIGKILL once its grace has passed, or at the safe-work deadline of the last renewal when that comes
// first (the 20 s grace: the Lease is not renewed while the command stops, and it must be gone before the
// Lease can expire); the Lease is released only once the command is gone, and the standby's command
// starts after. On a lost Lease the command gets SIGKILL at once: the Lease's new holder may run its own
// now. The exit status is 137 with a message that says which; the first `fencekit run` starts its command
// once and never takes the Lease again.
func TestFencekitRunOneCommandAtATime(t *testing.T) {
	t.Parallel()
	bin := buildFencekit(t)
	for i, grace := range []time.Duration{2 * time.Second, 5 * time.Second, 20 * time.Second} {
		for j, how := range []string{"sigterm", "lost"} {
			t.Run(fmt.Sprintf("%s/grace=%s", how, grace), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				lease := fmt.Sprintf("once-%s-%d", how, int(grace.Seconds()))
				// A command line of its own, to find it in /proc: sleep inherits the ignored SIGTERM.
				sleep := []string{"sleep", fmt.Sprint(1000000 + 10*(os.Getpid()%100000) + 2*i + j)}
				log := filepath.Join(t.TempDir(), "started.log")
				script := fmt.Sprintf(`trap "" TERM; echo "$FENCEKIT_HOLDER $FENCEKIT_EPOCH" >> %s; exec %s`, log, strings.Join(sleep, " "))
				run := func(identity string) *fencekitProc {
					return startFencekit(t, bin, nil, "run", "--kubeconfig="+target.W1Kubeconfig, "--namespace="+target.Namespace,
						"--lease="+lease, "--identity="+identity, fmt.Sprintf("--grace=%s", grace), "--", "sh", "-c", script)
				}
				p := run("once")
				waitFor(t, 30*time.Second, "the command to start", func() bool { return len(commandsOf(sleep)) == 1 })
				standby := run("standby")
				time.Sleep(time.Second) // the standby watches the Lease
				var stoppedAt time.Time
				key := client.ObjectKey{Namespace: target.Namespace, Name: lease}
				switch how {
				case "sigterm":
					stoppedAt = time.Now()
					if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
						t.Fatal(err)
					}
				case "lost":
					var l coordinationv1.Lease
					if err := target.Admin.Get(ctx, key, &l); err != nil {
						t.Fatal(err)
					}
					now := metav1.NewMicroTime(time.Now())
					l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To("someone-else"), ptr.To[int32](1), &now
					if err := target.Admin.Update(ctx, &l); err != nil {
						t.Fatal(err)
					}
					stoppedAt = time.Now()
				}
				// releasedAt: the first poll that saw the Lease no longer held by "once".
				var lastAlive, releasedAt, standbyAt time.Time
				lastAlive = stoppedAt // it was running then (a lost Lease's command may be gone by the first poll)
				var most int
				var holders []string
				deadline := time.Now().Add(grace + 30*time.Second)
				for time.Now().Before(deadline) {
					n := len(commandsOf(sleep))
					most = max(most, n)
					var l coordinationv1.Lease
					if err := target.Admin.Get(ctx, key, &l); err == nil {
						h := ptr.Deref(l.Spec.HolderIdentity, "")
						if len(holders) == 0 || holders[len(holders)-1] != h {
							holders = append(holders, h)
						}
						if h != "once" && releasedAt.IsZero() {
							releasedAt = time.Now()
						}
					}
					started, _ := os.ReadFile(log)
					if strings.Contains(string(started), "standby ") {
						if standbyAt.IsZero() {
							standbyAt = time.Now()
						}
					} else if n > 0 {
						lastAlive = time.Now()
					}
					if exited, _ := p.wait(0); exited && !standbyAt.IsZero() && n == 1 {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				exited, err := p.wait(5 * time.Second)
				if !exited {
					t.Fatalf("fencekit run still runs %s after its term ended (grace %s); holders seen %v", time.Since(stoppedAt).Round(time.Millisecond), grace, holders)
				}
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 137 {
					t.Errorf("fencekit run ended with %v, want exit status 137", err)
				}
				// lastAlive is the last 20 ms poll that saw the first command.
				gone := lastAlive.Sub(stoppedAt)
				out := p.output()
				var want string
				switch {
				case how == "lost":
					want = "killed with SIGKILL at once: leadership ended (elector: leadership lost: holder_changed"
				case grace < 10*time.Second:
					want = fmt.Sprintf("killed with SIGKILL %s after SIGTERM: ", grace)
					if gone < grace-200*time.Millisecond {
						t.Errorf("the command was gone %s after SIGTERM, before its grace of %s", gone, grace)
					}
				default:
					want = fmt.Sprintf("after SIGTERM, at the safe-work deadline, before its grace of %s ended: ", grace)
					if gone >= 15*time.Second {
						t.Errorf("the command was gone %s after SIGTERM, not before its Lease (15 s) could expire", gone)
					}
				}
				if !strings.Contains(out, want) {
					t.Errorf("fencekit run's output does not say %q:\n%s", want, out)
				}
				if most != 1 {
					t.Errorf("%d commands of lease %s ran at once", most, lease)
				}
				started, _ := os.ReadFile(log)
				lines := strings.Split(strings.TrimSpace(string(started)), "\n")
				if len(lines) != 2 || !strings.HasPrefix(lines[0], "once ") || !strings.HasPrefix(lines[1], "standby ") {
					t.Errorf("commands started (holder, epoch): %q, want one of once's, then one of the standby's", lines)
				}
				if len(holders) > 1 && slices.Contains(holders[1:], "once") {
					t.Errorf("fencekit run took the Lease again after its term ended: holders in turn %v", holders)
				}
				if how == "sigterm" {
					switch {
					case !strings.Contains(out, "Released the Lease"):
						t.Errorf("fencekit run did not release the Lease: holders in turn %v", holders)
					case releasedAt.Before(lastAlive):
						t.Errorf("the Lease was released %s before the command was gone", lastAlive.Sub(releasedAt))
					}
				}
				_ = standby.cmd.Process.Signal(syscall.SIGTERM)
				t.Logf("term ended; command last seen +%s, Lease released +%s, standby's command started +%s; holders in turn %v",
					gone.Round(time.Millisecond), sinceOrNever(releasedAt, stoppedAt), sinceOrNever(standbyAt, stoppedAt), holders)
			})
		}
	}
}

func sinceOrNever(at, from time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}

// waitFor polls ok every 20 ms until it holds, and stops the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(timeout); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
	}
}

// TestFencekitRunPausedSupervisor: `fencekit run` alone is stopped (SIGSTOP to its pid, not its command's)
// while it leads, with a standby `fencekit run` on the same Lease (quick timings: a 2 s lease, a 200 ms
// safety margin), both running a command that ignores SIGTERM, at --grace 2s, 5s and 20s (a paused
// supervisor sends no signal, so no grace may matter). The command's watchdog kills it at the safe-work
// deadline, before the Lease expires: every 20 ms /proc shows at most one command of the Lease,
// and the standby's command starts once the first is gone. Continued, the paused `fencekit run` exits 137
// and says its watchdog killed the command.
func TestFencekitRunPausedSupervisor(t *testing.T) {
	t.Parallel()
	bin := buildFencekit(t)
	// One at a time: each pauses a supervisor on a 2 s lease, which other pauses' load should not blur.
	for i, grace := range []time.Duration{2 * time.Second, 5 * time.Second, 20 * time.Second} {
		t.Run(fmt.Sprintf("grace=%s", grace), func(t *testing.T) {
			pausedSupervisor(t, bin, fmt.Sprintf("paused-supervisor-%d", i), grace,
				[]string{"sleep", fmt.Sprint(2000000 + i*100000 + os.Getpid()%100000)})
		})
	}
}

// pausedSupervisor runs TestFencekitRunPausedSupervisor's case for one --grace, with sleep as the command.
func pausedSupervisor(t *testing.T, bin, lease string, grace time.Duration, sleep []string) {
	ctx := t.Context()
	log := filepath.Join(t.TempDir(), "started.log")
	script := fmt.Sprintf(`trap "" TERM; echo "$FENCEKIT_HOLDER $FENCEKIT_EPOCH" >> %s; exec %s`, log, strings.Join(sleep, " "))
	start := func(identity string) *fencekitProc {
		return startFencekit(t, bin, nil, append(append([]string{"run"}, electorFlags(target.W1Kubeconfig, lease, identity)...),
			"--grace="+grace.String(), "--", "sh", "-c", script)...)
	}
	a := start("a")
	waitFor(t, 30*time.Second, "a's command to start", func() bool { return len(commandsOf(sleep)) == 1 })
	b := start("b")
	time.Sleep(time.Second) // b stands by
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pausedAt := time.Now()
	var most int
	var goneAt, secondAt time.Time
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		n := len(commandsOf(sleep))
		most = max(most, n)
		if n == 0 && goneAt.IsZero() {
			goneAt = time.Now()
		}
		if n == 1 && !goneAt.IsZero() {
			secondAt = time.Now()
			break
		}
	}
	var l coordinationv1.Lease
	if err := target.Admin.Get(ctx, client.ObjectKey{Namespace: target.Namespace, Name: lease}, &l); err != nil {
		t.Fatal(err)
	}
	started, _ := os.ReadFile(log)
	t.Logf("a paused; its command gone +%s, b's command started +%s; holder now %q; started: %q",
		sinceOrNever(goneAt, pausedAt), sinceOrNever(secondAt, pausedAt), ptr.Deref(l.Spec.HolderIdentity, ""), strings.TrimSpace(string(started)))
	if most != 1 {
		t.Errorf("%d commands of lease %s ran at once", most, lease)
	}
	if goneAt.IsZero() {
		t.Fatalf("a's command still runs %s after a was paused", time.Since(pausedAt).Round(time.Millisecond))
	}
	if secondAt.IsZero() || ptr.Deref(l.Spec.HolderIdentity, "") != "b" {
		t.Errorf("b's command did not start after a's was gone (holder %q)", ptr.Deref(l.Spec.HolderIdentity, ""))
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	exited, err := a.wait(30 * time.Second)
	if !exited {
		t.Fatal("a did not exit after it was continued")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 137 {
		t.Errorf("a ended with %v, want exit status 137", err)
	}
	if out := a.output(); !strings.Contains(out, "by its watchdog") {
		t.Errorf("a's output does not say its watchdog killed the command:\n%s", out)
	}
	_ = b
}

// TestFencekitRunKilledSupervisor: `fencekit run` killed with SIGKILL while it leads: nothing is left to
// stop its command but the command's watchdog, which sees its supervisor gone and kills the command at
// once (before the Lease expires and another holder's command could start).
func TestFencekitRunKilledSupervisor(t *testing.T) {
	t.Parallel()
	bin := buildFencekit(t)
	sleep := []string{"sleep", fmt.Sprint(3000000 + os.Getpid()%100000)}
	p := startFencekit(t, bin, nil, append(append([]string{"run"}, electorFlags(target.W1Kubeconfig, "killed-supervisor", "a")...),
		"--", "sh", "-c", `trap "" TERM; exec `+strings.Join(sleep, " "))...)
	waitFor(t, 30*time.Second, "the command to start", func() bool { return len(commandsOf(sleep)) == 1 })
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	waitFor(t, 30*time.Second, "the command to be gone after fencekit run was killed", func() bool { return len(commandsOf(sleep)) == 0 })
	t.Logf("fencekit run killed; its command gone +%s", time.Since(killedAt).Round(time.Millisecond))
}
