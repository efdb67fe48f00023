package e2e

import (
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/test/util/kubeconfig"
	"github.com/fencekit/fencekit/test/util/netproxy"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestFencekitRunAgainAfterLoss: `fencekit run --on-loss=again` runs the PostgreSQL writer script and loses
// its Lease twice without exiting. First the apiserver becomes unreachable to it (a proxy holds every byte)
// past RenewDeadline: its term ends at the safe-work deadline, the script is stopped, and once the
// apiserver answers again it acquires anew and runs the script at a higher epoch. Then the whole holder is
// paused (SIGSTOP) past its lease while a second `fencekit run --on-loss=again` stands by: that one takes
// over and writes; the paused script, continued first, has every write refused by PostgreSQL; its
// supervisor, continued, stops it and stands by; when the second one is stopped, the first acquires again
// and writes at a still higher epoch, once b's script has exited. No write of an ended term is
// admitted after the next acquisition.
func TestFencekitRunAgainAfterLoss(t *testing.T) {
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
	proxy, kc := proxied(t, target.W1Kubeconfig)

	const lease = "run-again"
	start := func(kubeconfig, identity string) *runProc {
		return startRunOn(t, bin, kubeconfig, lease, identity, dsn, "--on-loss=again")
	}
	a := start(kc, "again-a")
	a.waitLine(t, "a's first accepted write", func(l string) bool { return strings.HasPrefix(l, "accepted ") })
	first := epochOf(t, a.lines())

	// Loss 1: the apiserver unreachable past RenewDeadline (1.5 s) and the lease (2 s).
	proxy.Set(netproxy.Blackhole, 0)
	time.Sleep(4 * time.Second)
	proxy.Set(netproxy.Pass, 0)
	second := waitAcceptedAbove(t, a, first)
	t.Logf("a wrote at epoch %d, lost the apiserver for 4s, and writes again at epoch %d", first, second)

	// Loss 2: the whole holder paused past its lease while b stands by.
	b := start(target.W2Kubeconfig, "again-b")
	time.Sleep(time.Second) // b stands by
	script, watchdog := a.children(t)
	for _, pid := range []int{a.cmd.Process.Pid, watchdog} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Kill(-script, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	bEpoch := waitAcceptedAbove(t, b, second)
	if err := syscall.Kill(-script, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.waitLine(t, "a's old script has a write refused after it resumed", func(l string) bool {
		return strings.HasPrefix(l, "refused ") && strings.HasSuffix(l, " "+strconv.FormatInt(second, 10))
	})
	for _, pid := range []int{a.cmd.Process.Pid, watchdog} {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "a's old script is stopped by its supervisor", func() (bool, string) {
		return !procfs.Running(script), fmt.Sprintf("process %d runs", script)
	})
	if exited, err := a.wait(0); exited {
		t.Fatalf("a's fencekit run exited after it lost the Lease (%v), want it to stand by", err)
	}
	// b stops (and releases): a acquires again. b stops its script before it releases the Lease, so the
	// script is gone once a writes; b's own process exits a moment after the release.
	bScript, _ := b.children(t)
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	third := waitAcceptedAbove(t, a, bEpoch)
	if procfs.Running(bScript) {
		t.Errorf("a writes at epoch %d while b's script (process %d) still runs", third, bScript)
	}
	if exited, err := b.wait(30 * time.Second); !exited {
		t.Errorf("b's fencekit run did not exit within 30 s of its SIGTERM")
	} else if code := exitCode(err); code != 143 {
		t.Errorf("b's fencekit run ended with %v, want exit status 143 (its script stopped with SIGTERM)", err)
	}
	t.Logf("b took over at epoch %d while a was paused; b stopped; a writes again at epoch %d", bEpoch, third)

	// Whether a's script of epoch second had a write accepted after b's of bEpoch is PostgreSQL's order to
	// say, not the script's log: the script logs a write after psql returns, so a write committed before the
	// pause can be logged after the resume. What PostgreSQL kept: epochs never go down in the order of the
	// writes.
	rows, err := db.QueryContext(ctx, `SELECT holder, epoch FROM orders_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var last int64
	for rows.Next() {
		var holder string
		var epoch int64
		if err := rows.Scan(&holder, &epoch); err != nil {
			t.Fatal(err)
		}
		if epoch < last {
			t.Errorf("orders_log has a write of %s at epoch %d after one at epoch %d", holder, epoch, last)
		}
		last = epoch
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// waitAcceptedAbove waits for p's script to have a write accepted at an epoch above after, and returns it.
func waitAcceptedAbove(t *testing.T, p *runProc, after int64) int64 {
	t.Helper()
	var got int64
	p.waitLine(t, fmt.Sprintf("%s's write accepted at an epoch above %d", filepath.Base(p.log), after), func(l string) bool {
		fs := strings.Fields(l)
		if len(fs) != 3 || fs[0] != "accepted" {
			return false
		}
		e, err := strconv.ParseInt(fs[2], 10, 64)
		if err != nil || e <= after {
			return false
		}
		got = e
		return true
	})
	return got
}

// proxied writes a copy of kubeconfig that reaches its apiserver through a proxy of the test's.
func proxied(t *testing.T, path string) (*netproxy.Proxy, string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	p, err := netproxy.NewProxy("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c := rest.CopyConfig(cfg)
	c.Host = "https://" + p.Addr()
	out := filepath.Join(t.TempDir(), "kubeconfig")
	if err := kubeconfig.Write(out, c); err != nil {
		t.Fatal(err)
	}
	return p, out
}

// exitCode is the exit status in a process's Wait error (0 for nil, -1 for another error).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}
