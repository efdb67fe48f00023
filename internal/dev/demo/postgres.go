package demo

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/fencekit/fencekit/internal/dev/postgres"
	"github.com/fencekit/fencekit/internal/procfs"
)

// Postgres is the paused-holder scenario's second target: a row of a PostgreSQL table, written by a shell
// script that `fencekit run` starts while it leads, with psql and $FENCEKIT_EPOCH. Fenced, the script's
// UPDATE carries the row-level fence (fence_epoch <= the token, then raised to it: the database refuses a
// stale epoch); unfenced, the same UPDATE without that condition, under the same elector.
type Postgres struct {
	// DB is an admin connection to the database, DSN its connection string for the scripts.
	DB  *sql.DB
	DSN string
	// PSQL is the psql binary; Fencekit the fencekit CLI, built.
	PSQL, Fencekit string
}

// pgScript is what each worker runs: it announces its leadership, then makes WRITES writes every
// INTERVAL seconds, stopping itself with SIGSTOP just before write STOP_BEFORE (0: never), and logs each
// step as a JSON line in examples/worker's format, which the demo reads.
const pgScript = `now() { date -u +%Y-%m-%dT%H:%M:%S.%NZ; }
say() { printf '{"time":"%s","holder":"%s","epoch":%s,%s}\n' "$(now)" "$FENCEKIT_HOLDER" "$FENCEKIT_EPOCH" "$1"; }
say '"msg":"leading"'
n=0
while [ "$n" -lt "$WRITES" ]; do
  n=$((n+1))
  sleep "$INTERVAL"
  if [ "$n" = "$STOP_BEFORE" ]; then say '"msg":"pausing","write":'$n; kill -STOP $$; fi
  if [ -n "$FENCED" ]; then
    where="id = 1 AND fence_epoch <= $FENCEKIT_EPOCH"
  else
    where="id = 1"
  fi
  out=$("$PSQL" "$DSN" -qtA -c "UPDATE $TABLE SET writer = '$FENCEKIT_HOLDER', write = $n, fence_epoch = $FENCEKIT_EPOCH WHERE $where RETURNING write" 2>&1)
  if [ "$out" = "$n" ]; then
    say '"msg":"write","write":'$n',"accepted":true'
  elif [ -z "$out" ]; then
    say '"msg":"write","write":'$n',"accepted":false,"reason":"FencingStaleEpoch","error":"UPDATE 0: the row'"'"'s fence_epoch is above '$FENCEKIT_EPOCH'"'
    exit 0
  else
    say '"msg":"write","write":'$n',"accepted":false,"error":"psql failed"'
  fi
done`

// RunPostgres plays the paused holder against a PostgreSQL row: W1 leads, writes once, is stopped (its
// script and its fencekit run) just before its second write, past its lease; W2 takes over and writes; W1's
// script is continued and makes its write, then its fencekit run, which stops it.
func RunPostgres(ctx context.Context, t Target, pg Postgres, s Settings, fenced bool, live func(Event)) (*Result, error) {
	r := &runner{t: t, s: s, scenario: PausedHolder, fenced: fenced, name: runName("postgres", fenced), start: time.Now(), live: live}
	defer r.stopAll()
	res, err := r.runPostgres(ctx, pg)
	if res != nil {
		r.mu.Lock()
		res.Events = append([]Event(nil), r.events...)
		r.mu.Unlock()
	}
	return res, err
}

func (r *runner) runPostgres(ctx context.Context, pg Postgres) (*Result, error) {
	table := strings.ReplaceAll(r.name, "-", "_")
	target := "PostgreSQL row, fence column"
	if !r.fenced {
		target = "PostgreSQL row, no fence"
	}
	res := &Result{Scenario: PausedHolder, Fenced: r.fenced, Settings: r.s, Target: target}
	if _, err := pg.DB.ExecContext(ctx, `CREATE TABLE `+table+` (id int PRIMARY KEY, writer text, write int, fence_epoch bigint NOT NULL DEFAULT 0);
		INSERT INTO `+table+` (id) VALUES (1)`); err != nil {
		return nil, fmt.Errorf("creating table %s: %w", table, err)
	}
	r.sayf("created table %s; each worker is fencekit run with a psql script", table)
	w1Config, w2Config := r.kubeconfigs()
	start := func(name, kubeconfig string, writes, stopBefore int) (*process, error) {
		env := []string{"PSQL=" + pg.PSQL, "DSN=" + pg.DSN, "TABLE=" + table, "WRITES=" + strconv.Itoa(writes),
			"STOP_BEFORE=" + strconv.Itoa(stopBefore), "INTERVAL=" + strconv.FormatFloat(r.s.Interval.Seconds(), 'f', 3, 64)}
		if r.fenced {
			env = append(env, "FENCED=1")
		}
		p, err := startProcess(name, pg.Fencekit, kubeconfig, env, r.start, r.record, "run",
			"--namespace="+r.t.Namespace, "--lease="+r.name+"-writer", "--identity="+name,
			"--lease-duration="+r.s.LeaseDuration.String(), "--renew-deadline="+r.s.RenewDeadline.String(),
			"--retry-period="+r.s.RetryPeriod.String(), "--safety-margin="+r.s.SafetyMargin.String(),
			"--fence-on-acquire=false", "--", "sh", "-c", pgScript)
		if err != nil {
			return nil, err
		}
		r.procs = append(r.procs, p)
		return p, nil
	}
	w1, err := start("W1", w1Config, 2, 2)
	if err != nil {
		return nil, err
	}
	if res.W1Epoch, err = r.leadsAndWrites(ctx, w1, "an accepted first write"); err != nil {
		return nil, err
	}
	w2, err := start("W2", w2Config, 1, 0)
	if err != nil {
		return nil, err
	}
	if _, err := w1.waitFor(ctx, 10*r.s.Interval+10*time.Second, "the pause before write 2", isMsg("pausing")); err != nil {
		return nil, err
	}
	// The script stopped itself; stop its fencekit run and the script's watchdog too: the whole holder is
	// paused, as in a frozen node or container, so nothing renews its Lease and nothing can signal the
	// script.
	var script, watchdog int
	kids := w1.children()
	for _, pid := range kids {
		if args, _ := procfs.Cmdline(pid); len(args) > 0 && args[0] == w1.cmd.Path {
			watchdog = pid
		} else {
			script = pid
		}
	}
	if len(kids) != 2 || script == 0 || watchdog == 0 {
		return nil, fmt.Errorf("W1's fencekit run has children %v, want its script and the script's watchdog", kids)
	}
	for _, pid := range []int{w1.cmd.Process.Pid, watchdog} {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, err
		}
	}
	defer func() { _ = syscall.Kill(watchdog, syscall.SIGCONT) }()
	res.Stopped = time.Since(r.start)
	r.sayf("W1 stopped with SIGSTOP (its script and its fencekit run) just before write 2")

	if res.W2Epoch, err = r.leadsAndWrites(ctx, w2, "an accepted write"); err != nil {
		return nil, err
	}
	if wait := res.Stopped + r.s.Pause - time.Since(r.start); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// The script resumes first (the order in which a paused pod's processes resume is anyone's), so its
	// fencekit run cannot stop it before it writes.
	if err := syscall.Kill(-script, syscall.SIGCONT); err != nil {
		return nil, err
	}
	res.Resumed = time.Since(r.start)
	r.sayf("W1 resumed with SIGCONT after %.1fs stopped", (res.Resumed - res.Stopped).Seconds())
	if res.LateWrite, err = w1.waitFor(ctx, 30*time.Second, "its late write", func(e Event) bool { return e.Msg == "write" && e.Write == 2 }); err != nil {
		return nil, err
	}
	_ = w1.signal(syscall.SIGCONT)
	r.stopAll()

	var writer sql.NullString
	var write sql.NullInt64
	var epoch int64
	if err := pg.DB.QueryRowContext(ctx, `SELECT writer, write, fence_epoch FROM `+table+` WHERE id = 1`).Scan(&writer, &write, &epoch); err != nil {
		return nil, fmt.Errorf("reading table %s: %w", table, err)
	}
	res.Final = map[string]any{"writer": writer.String, "write": write.Int64, "epoch": epoch}
	return res, nil
}

// StartPostgres starts a throwaway PostgreSQL server (Debian's postgresql package) and builds the fencekit
// CLI for the postgres scenario. stop stops the server and removes what was built.
func StartPostgres(root string) (pg Postgres, stop func(), err error) {
	srv, err := postgres.Start()
	if err != nil {
		return pg, nil, err
	}
	dir, err := os.MkdirTemp("", "fencekit-demo-pg-")
	if err != nil {
		_ = srv.Stop()
		return pg, nil, err
	}
	stop = func() {
		if pg.DB != nil {
			_ = pg.DB.Close()
		}
		_ = srv.Stop()
		_ = os.RemoveAll(dir)
	}
	bindir, err := postgres.BinDir()
	if err == nil {
		pg.Fencekit, err = Build(root, dir, "./cmd/fencekit")
	}
	if err == nil {
		pg.DSN, pg.PSQL = srv.DSN("postgres"), filepath.Join(bindir, "psql")
		pg.DB, err = sql.Open("pgx", pg.DSN)
	}
	if err != nil {
		stop()
		return pg, nil, err
	}
	return pg, stop, nil
}
