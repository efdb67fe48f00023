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

	"github.com/fencekit/fencekit/internal/cli/leadrun"
	"github.com/fencekit/fencekit/internal/dev/demo"
	"github.com/fencekit/fencekit/internal/dev/postgres"
	"github.com/fencekit/fencekit/internal/procfs"
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

type runProc struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startRun starts `fencekit run` as a worker of the demo's cluster, running the writer script.
func startRun(t *testing.T, bin, kubeconfig, identity, dsn string) *runProc {
	t.Helper()
	dir := t.TempDir()
	bindir, err := postgres.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := &runProc{log: filepath.Join(dir, "writes.log"), done: make(chan error, 1)}
	p.cmd = exec.Command(bin, "run", "--kubeconfig="+kubeconfig, "--namespace="+target.Namespace, "--lease=run-orders",
		"--identity="+identity, "--lease-duration=2s", "--renew-deadline=1500ms", "--retry-period=300ms",
		"--safety-margin=200ms", "--grace=2s", "--", "sh", "-c", writer)
	p.cmd.Env = append(os.Environ(), "PSQL="+filepath.Join(bindir, "psql"), "DSN="+dsn, "LOG="+p.log)
	out, err := os.Create(filepath.Join(dir, "fencekit-run.out"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(out.Name())
			t.Logf("%s's output:\n%s", identity, b)
		}
	})
	return p
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

// child is the process group `fencekit run` started the script in (its leader's pid).
func (p *runProc) child(t *testing.T) int {
	t.Helper()
	pids := procfs.Children(p.cmd.Process.Pid)
	if len(pids) != 1 {
		t.Fatalf("fencekit run %d has children %v, want exactly the script", p.cmd.Process.Pid, pids)
	}
	return pids[0]
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
	bin, err := demo.Build(testenv.RepoRoot(), t.TempDir(), "./cmd/fencekit")
	if err != nil {
		t.Fatal(err)
	}

	a := startRun(t, bin, target.W1Kubeconfig, "run-a", dsn)
	a.waitLine(t, "run-a's first accepted write", func(l string) bool { return strings.HasPrefix(l, "accepted ") })
	script := a.child(t)
	// The pause: the supervisor and the script together, as a GC pause or a frozen node would.
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
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
	// Then its supervisor resumes, finds its deadline passed and stops the script.
	if err := syscall.Kill(a.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 143 {
			t.Errorf("fencekit run (run-a) ended with %v, want exit status 143 (its script stopped with SIGTERM)", err)
		}
		a.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("run-a's fencekit run did not stop its script after it resumed")
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
	bin, err := demo.Build(testenv.RepoRoot(), t.TempDir(), "./cmd/fencekit")
	if err != nil {
		t.Fatal(err)
	}
	type sidecar struct {
		cmd       *exec.Cmd
		url, file string
	}
	start := func(identity, kubeconfig string) sidecar {
		dir := t.TempDir()
		s := sidecar{url: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), file: filepath.Join(dir, "token.json")}
		s.cmd = exec.Command(bin, "elect", "--kubeconfig="+kubeconfig, "--namespace="+target.Namespace, "--lease=elect-orders",
			"--identity="+identity, "--lease-duration=2s", "--renew-deadline=1500ms", "--retry-period=300ms", "--safety-margin=200ms",
			"--serve="+strings.TrimPrefix(s.url, "http://"), "--token-file="+s.file)
		out, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		s.cmd.Stdout, s.cmd.Stderr = out, out
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = s.cmd.Process.Signal(syscall.SIGCONT)
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			_ = s.cmd.Wait()
		})
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
	leads := func(s sidecar, epoch int64) func() (bool, string) {
		return func() (bool, string) {
			code, st := token(s)
			return code == http.StatusOK && st.Leader && (epoch == 0 || st.Epoch == epoch), fmt.Sprintf("%d %+v", code, st)
		}
	}
	a := start("elect-a", target.W1Kubeconfig)
	testenv.Eventually(t, "elect-a leads", leads(a, 0))
	_, first := token(a)
	b := start("elect-b", target.W2Kubeconfig)
	testenv.Eventually(t, "elect-b serves, not leading", func() (bool, string) {
		code, st := token(b)
		return code == http.StatusServiceUnavailable && !st.Leader, fmt.Sprintf("%d %+v", code, st)
	})

	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "elect-b leads at the next epoch", leads(b, first.Epoch+1))
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
