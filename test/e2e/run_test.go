package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/cli/leadrun"
	"github.com/fencekit/fencekit/internal/dev/demo"
	"github.com/fencekit/fencekit/internal/dev/postgres"
	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// writer is the workload `fencekit run` runs: a shell script that knows nothing of Kubernetes. Every
// 200 ms it appends a row to orders_log in one statement that first raises the fence row "orders" to
// $FENCEKIT_EPOCH, and only if that row was not already above it (the fence check, done by PostgreSQL):
// a stale epoch inserts nothing. It logs "accepted N" or "refused N".
const writer = `n=0
while :; do
  n=$((n+1))
  out=$("$PSQL" "$DSN" -qtA -v ON_ERROR_STOP=1 -c "WITH f AS (UPDATE fencekit_fences SET epoch = $FENCEKIT_EPOCH, holder = '$FENCEKIT_HOLDER' WHERE name = 'orders' AND epoch <= $FENCEKIT_EPOCH RETURNING 1) INSERT INTO orders_log (holder, epoch, n) SELECT '$FENCEKIT_HOLDER', $FENCEKIT_EPOCH, $n FROM f RETURNING n") || exit 1
  if [ "$out" = "$n" ]; then echo "accepted $n $FENCEKIT_EPOCH" >> "$LOG"; else echo "refused $n $FENCEKIT_EPOCH" >> "$LOG"; fi
  sleep 0.2
done`

// fencekitProc is one `fencekit` command a test started, its stdout and stderr in a file.
type fencekitProc struct {
	cmd *exec.Cmd
	out string
	// done receives what Wait returned; whoever takes it puts it back, for the next reader and the cleanup.
	done chan error
}

// startFencekit starts bin (cmd/fencekit, built) with args, env added to the test's environment. When the
// test ends, the command is continued (it may have been stopped) and ended with SIGTERM, and its output is
// logged if the test failed.
func startFencekit(t *testing.T, bin string, env []string, args ...string) *fencekitProc {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "fencekit.out"))
	if err != nil {
		t.Fatal(err)
	}
	p := &fencekitProc{cmd: exec.Command(bin, args...), out: out.Name(), done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("starting fencekit %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		err := p.cmd.Wait()
		_ = out.Close()
		p.done <- err
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		p.done <- <-p.done
		if t.Failed() {
			t.Logf("fencekit %s's output:\n%s", strings.Join(args, " "), p.output())
		}
	})
	return p
}

// wait waits up to timeout for the command to exit: it reports whether it did, and what Wait returned.
func (p *fencekitProc) wait(timeout time.Duration) (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	case <-time.After(timeout):
		return false, nil
	}
}

// output is what the command printed so far.
func (p *fencekitProc) output() string {
	b, _ := os.ReadFile(p.out)
	return string(b)
}

// buildFencekit builds cmd/fencekit.
func buildFencekit(t *testing.T) string {
	t.Helper()
	bin, err := demo.Build(testenv.RepoRoot(), t.TempDir(), "./cmd/fencekit")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// electorFlags are the flags of `fencekit run` and `fencekit elect` that make identity, authenticated by
// kubeconfig, compete for lease in the target's namespace at quick timings (a 2 s lease).
func electorFlags(kubeconfig, lease, identity string) []string {
	return []string{"--kubeconfig=" + kubeconfig, "--namespace=" + target.Namespace, "--lease=" + lease, "--identity=" + identity,
		"--lease-duration=2s", "--renew-deadline=1500ms", "--retry-period=300ms", "--safety-margin=200ms"}
}

// runProc is `fencekit run` running the writer script, which logs its writes to log.
type runProc struct {
	*fencekitProc
	log string
}

// startRun starts `fencekit run` as a worker of the demo's cluster, running the writer script.
func startRun(t *testing.T, bin, kubeconfig, identity, dsn string) *runProc {
	t.Helper()
	return startRunOn(t, bin, kubeconfig, "run-orders", identity, dsn)
}

// startRunOn is startRun on another Lease, with more flags of `fencekit run`.
func startRunOn(t *testing.T, bin, kubeconfig, lease, identity, dsn string, flags ...string) *runProc {
	t.Helper()
	bindir, err := postgres.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "writes.log")
	args := append(append(electorFlags(kubeconfig, lease, identity), flags...), "--grace=2s", "--", "sh", "-c", writer)
	return &runProc{log: log, fencekitProc: startFencekit(t, bin, []string{"PSQL=" + filepath.Join(bindir, "psql"), "DSN=" + dsn, "LOG=" + log}, append([]string{"run"}, args...)...)}
}

// lines returns the script's log so far.
func (p *runProc) lines() []string {
	f, err := os.Open(p.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	for s := bufio.NewScanner(f); s.Scan(); {
		out = append(out, s.Text())
	}
	return out
}

func (p *runProc) waitLine(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	testenv.Eventually(t, what, func() (bool, string) {
		ls := p.lines()
		for _, l := range ls {
			if ok(l) {
				return true, ""
			}
		}
		return false, strings.Join(ls, "; ")
	})
}

// children are the process group `fencekit run` started the script in (its leader's pid) and the script's
// watchdog (a fencekit process).
func (p *runProc) children(t *testing.T) (script, watchdog int) {
	t.Helper()
	pids := procfs.Children(p.cmd.Process.Pid)
	for _, pid := range pids {
		args, _ := procfs.Cmdline(pid)
		if len(args) > 0 && args[0] == p.cmd.Path {
			watchdog = pid
		} else {
			script = pid
		}
	}
	if len(pids) != 2 || script == 0 || watchdog == 0 {
		t.Fatalf("fencekit run %d has children %v, want exactly the script and its watchdog", p.cmd.Process.Pid, pids)
	}
	return script, watchdog
}

// TestFencekitRunPausedPastLease: a shell script run by `fencekit run` writes to PostgreSQL with
// $FENCEKIT_EPOCH. The whole holder (fencekit run and its script) is stopped with SIGSTOP past its lease;
// a second `fencekit run` takes over at the next epoch and its script writes. The first script is
// continued before its supervisor can stop it, as the order in which a paused pod's processes resume is
// anyone's: its writes are refused by PostgreSQL, and nothing it wrote after the takeover is kept. Its
// supervisor then sees its deadline passed and stops it with SIGTERM.
func TestFencekitRunPausedPastLease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, dsn := pg.Database(t)
	f, err := sqlfence.New("orders", sqlfence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders_log (id bigserial PRIMARY KEY, holder text NOT NULL, epoch bigint NOT NULL, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	bin := buildFencekit(t)

	a := startRun(t, bin, target.W1Kubeconfig, "run-a", dsn)
	a.waitLine(t, "run-a's first accepted write", func(l string) bool { return strings.HasPrefix(l, "accepted ") })
	script, watchdog := a.children(t)
	// The pause: the supervisor, the script and its watchdog together, as a frozen node or container would.
	for _, pid := range []int{a.cmd.Process.Pid, watchdog} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(-script, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	aEpoch := epochOf(t, a.lines())

	b := startRun(t, bin, target.W2Kubeconfig, "run-b", dsn)
	b.waitLine(t, "run-b's first accepted write", func(l string) bool { return strings.HasPrefix(l, "accepted ") })
	bEpoch := epochOf(t, b.lines())
	if bEpoch <= aEpoch {
		t.Fatalf("run-b wrote at epoch %d, not above run-a's %d", bEpoch, aEpoch)
	}

	// The script resumes first and writes with its old epoch: refused by the database.
	refusedBefore := len(a.lines())
	if err := syscall.Kill(-script, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "run-a's script has a write refused after it resumed", func() (bool, string) {
		ls := a.lines()
		for _, l := range ls[refusedBefore:] {
			if strings.HasPrefix(l, "refused ") {
				return true, ""
			}
		}
		return false, strings.Join(ls, "; ")
	})
	for _, l := range a.lines()[refusedBefore:] {
		if strings.HasPrefix(l, "accepted ") {
			t.Errorf("run-a's script had a write accepted after run-b took over at epoch %d: %q", bEpoch, l)
		}
	}
	// Then its supervisor resumes, finds its deadline passed and stops the script (before its watchdog,
	// continued after it, would).
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(watchdog, syscall.SIGCONT) }()
	exited, err := a.wait(30 * time.Second)
	if !exited {
		t.Fatal("run-a's fencekit run did not stop its script after it resumed")
	}
	// On a loaded machine the watchdog may reach the safe-work deadline before the test's SIGSTOP reaches
	// it: then it, not the supervisor, stopped the script (137, and fencekit run says so). Either way the
	// script is stopped and none of its writes after the takeover was accepted (checked above and below).
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.ExitCode() == 143:
	case errors.As(err, &ee) && ee.ExitCode() == 137 && strings.Contains(a.output(), "killed with SIGKILL by its watchdog"):
		t.Logf("run-a's watchdog stopped the script before it was paused (exit 137)")
	default:
		t.Errorf("fencekit run (run-a) ended with %v, want exit status 143 (its script stopped with SIGTERM), or 137 from its watchdog", err)
	}

	// The database's own history: once run-b's epoch appears, no row of an earlier epoch follows.
	rows, err := db.QueryContext(context.WithoutCancel(ctx), `SELECT holder, epoch FROM orders_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var maxEpoch int64
	var history []string
	for rows.Next() {
		var holder string
		var epoch int64
		if err := rows.Scan(&holder, &epoch); err != nil {
			t.Fatal(err)
		}
		history = append(history, fmt.Sprintf("%s@%d", holder, epoch))
		if epoch < maxEpoch {
			t.Errorf("a write at epoch %d by %s was kept after one at epoch %d: %v", epoch, holder, maxEpoch, history)
		}
		maxEpoch = max(maxEpoch, epoch)
	}
	if maxEpoch != bEpoch {
		t.Errorf("the highest epoch written is %d, want run-b's %d: %v", maxEpoch, bEpoch, history)
	}
}

// epochOf is the epoch of the first accepted write in a script's log.
func epochOf(t *testing.T, lines []string) int64 {
	t.Helper()
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "accepted" {
			e, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
	}
	t.Fatalf("no accepted write in %q", lines)
	return 0
}

// TestPostgresScenario is `fencekit-dev demo --scenario postgres` at the quick timings: fenced, the paused
// holder's late UPDATE is refused by the row's fence column and W2's row stays; unfenced, the same UPDATE
// without the fence overwrites it.
func TestPostgresScenario(t *testing.T) {
	t.Parallel()
	pgDemo, stop, err := demo.StartPostgres(testenv.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	fenced, unfenced := both(t, func(t *testing.T, fenced bool, name string) (*demo.Result, error) {
		return demo.RunPostgres(t.Context(), *target, pgDemo, demo.QuickSettings(), fenced, func(e demo.Event) { t.Log(demo.Style{}.Line(name, e)) })
	})
	if err := demo.Check(fenced, unfenced); err != nil {
		t.Fatal(err)
	}
	if got := fenced.Final["epoch"]; got != fenced.W2Epoch {
		t.Errorf("the fenced row's fence_epoch is %v, want W2's %d", got, fenced.W2Epoch)
	}
}

// TestFencekitElectSidecar runs two `fencekit elect` sidecars as real processes. The leader serves its
// token and writes it to its file; stopped with SIGSTOP past its lease, it loses the Lease to the other,
// which serves the next epoch; continued, it no longer claims to lead, on /token, /leader and in its file.
func TestFencekitElectSidecar(t *testing.T) {
	t.Parallel()
	bin := buildFencekit(t)
	type sidecar struct {
		*fencekitProc
		url, file string
	}
	start := func(identity, kubeconfig string) sidecar {
		s := sidecar{url: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), file: filepath.Join(t.TempDir(), "token.json")}
		args := append(electorFlags(kubeconfig, "elect-orders", identity), "--serve="+strings.TrimPrefix(s.url, "http://"), "--token-file="+s.file)
		s.fencekitProc = startFencekit(t, bin, nil, append([]string{"elect"}, args...)...)
		return s
	}
	token := func(s sidecar) (int, leadrun.State) {
		resp, err := http.Get(s.url + "/token")
		if err != nil {
			return 0, leadrun.State{}
		}
		defer resp.Body.Close()
		var st leadrun.State
		_ = json.NewDecoder(resp.Body).Decode(&st)
		return resp.StatusCode, st
	}
	// leads waits until s serves a token as the leader (at epoch, unless 0) and returns that token.
	leads := func(s sidecar, epoch int64, what string) leadrun.State {
		var got leadrun.State
		testenv.Eventually(t, what, func() (bool, string) {
			code, st := token(s)
			got = st
			return code == http.StatusOK && st.Leader && (epoch == 0 || st.Epoch == epoch), fmt.Sprintf("%d %+v", code, st)
		})
		return got
	}
	a := start("elect-a", target.W1Kubeconfig)
	leads(a, 0, "elect-a leads")
	b := start("elect-b", target.W2Kubeconfig)
	testenv.Eventually(t, "elect-b serves, not leading", func() (bool, string) {
		code, st := token(b)
		return code == http.StatusServiceUnavailable && !st.Leader, fmt.Sprintf("%d %+v", code, st)
	})

	// The epoch a holds when it is stopped: under load it may have lost and taken the Lease again since it
	// first led, so it is read as a leader's token right before the stop.
	first := leads(a, 0, "elect-a still leads before it is stopped")
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	leads(b, first.Epoch+1, "elect-b leads at the next epoch")
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "elect-a, continued, no longer claims to lead", func() (bool, string) {
		code, st := token(a)
		resp, err := http.Get(a.url + "/leader")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		b, _ := os.ReadFile(a.file)
		var fromFile leadrun.State
		_ = json.Unmarshal(b, &fromFile)
		return code == http.StatusServiceUnavailable && !st.Leader && resp.StatusCode == http.StatusServiceUnavailable && !fromFile.Leader,
			fmt.Sprintf("/token %d %+v, /leader %d, file %s", code, st, resp.StatusCode, b)
	})
}

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
	bin := buildFencekit(t)
	epochFile := filepath.Join(t.TempDir(), "epoch")
	p := startFencekit(t, bin, []string{"OUT=" + epochFile}, "run", "--kubeconfig="+target.W1Kubeconfig, "--namespace="+target.Namespace,
		"--lease="+lease, "--identity=run-bulk", "--", "sh", "-c", `echo "$FENCEKIT_EPOCH" > "$OUT"`)
	// The elector gives up on the fence after PostAcquireTimeout and competes again; this bound only keeps
	// a command that never runs from hanging the test.
	exited, err := p.wait(testenv.EventuallyTimeout + elector.DefaultLeaseDuration)
	if !exited {
		t.Fatalf("fencekit run never ran its command with %d FencedResources bound to lease %s", n, lease)
	}
	if err != nil {
		t.Fatalf("fencekit run: %v", err)
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
		if fr.Spec.FencedEpoch() != epoch {
			t.Errorf("FencedResource %s is at epoch %d, want %d (the epoch fencekit run handed its command)", fr.Name, fr.Spec.FencedEpoch(), epoch)
		}
	}
}

// TestFencekitRunWithoutFenceOnDeclaredLease: `fencekit run` (fence-on-acquire by default) declares on its
// Lease that every acquisition fences the FencedResources; once it has, `fencekit run
// --fence-on-acquire=false` may not take the Lease (the Lease policy refuses an acquisition that drops
// the declaration). What its user sees: each retry logs the refusal, which names the Lease, the
// declaration and the flag to use; after 3 refusals it exits with status 78 (setup), and the command
// never runs.
func TestFencekitRunWithoutFenceOnDeclaredLease(t *testing.T) {
	t.Parallel()
	const lease = "run-nofence"
	bin := buildFencekit(t)
	if out, err := exec.Command(bin, append(append([]string{"run"}, electorFlags(target.W1Kubeconfig, lease, "declares")...), "--", "true")...).CombinedOutput(); err != nil {
		t.Fatalf("fencekit run with fence-on-acquire: %v\n%s", err, out)
	}

	ran := filepath.Join(t.TempDir(), "ran")
	args := append(electorFlags(target.W1Kubeconfig, lease, "no-fence"), "--fence-on-acquire=false", "--", "sh", "-c", `touch "$RAN"`)
	p := startFencekit(t, bin, []string{"RAN=" + ran}, append([]string{"run"}, args...)...)
	exited, err := p.wait(time.Minute)
	if !exited {
		t.Fatal("fencekit run --fence-on-acquire=false retries a permanent refusal for ever")
	}
	if exit := (*exec.ExitError)(nil); !errors.As(err, &exit) || exit.ExitCode() != 78 {
		t.Fatalf("fencekit run --fence-on-acquire=false ended with %v, want exit status 78", err)
	}
	s := p.output()
	for _, w := range []string{
		`fenced lease ` + lease + ` declares that every acquisition fences its FencedResources (annotation fencing.fencekit.io/fences=fencedresources)`,
		`only an elector that fences them on acquire may take it`,
		`fencekit run and fencekit elect: --fence-on-acquire, the default`,
		"fencekit run: cannot elect on Lease " + target.Namespace + "/" + lease + ": refused by admission",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("its output lacks %q", w)
		}
	}
	if _, err := os.Stat(ran); !os.IsNotExist(err) {
		t.Fatalf("the command ran (%v) on a Lease this elector could not acquire", err)
	}
}
