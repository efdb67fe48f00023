package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// checkStale asserts err is fencekit's stale refusal for the fence, naming both epochs.
func checkStale(t *testing.T, err error, epoch, stored int64) {
	t.Helper()
	if !fencing.IsStale(err) {
		t.Fatalf("got %v, want a stale-epoch refusal", err)
	}
	var fe *fencing.Error
	errors.As(err, &fe)
	if fe.Epoch != epoch || fe.LeaseEpoch != stored || fe.Resource != "orders" {
		t.Errorf("error fields: Resource %q Epoch %d LeaseEpoch %d, want orders, %d, %d", fe.Resource, fe.Epoch, fe.LeaseEpoch, epoch, stored)
	}
	for _, s := range []string{"orders", "stale epoch " + itoa(epoch), "epoch " + itoa(stored)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// TestPausedHolder: the seed's scenario. Holder N begins its transaction and writes, pauses, holder N+1
// commits; when N resumes its raise is refused and none of its writes is kept.
func TestPausedHolder(t *testing.T) {
	db, f := setup(t, sqlfence.Options{})
	ctx := t.Context()
	if err := f.Run(ctx, db, token(5), write(5, "first")); err != nil {
		t.Fatal(err)
	}

	// N = 6 begins, writes, and pauses before raising the fence (the raise comes last here).
	txN, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txN.Rollback() }() // after a commit, sql.ErrTxDone
	if err := write(6, "paused holder")(ctx, txN); err != nil {
		t.Fatal(err)
	}
	// N+1 = 7 takes over and commits.
	if err := f.Run(ctx, db, token(7), write(7, "new holder")); err != nil {
		t.Fatal(err)
	}
	// N resumes.
	err = f.Raise(ctx, txN, token(6))
	checkStale(t, err, 6, 7)
	if !strings.Contains(err.Error(), "worker-7") {
		t.Errorf("error %q does not name the holder that raised the fence", err)
	}
	// Even a careless holder that ignores the refusal and commits keeps nothing: the fence aborted its
	// transaction.
	if _, err := txN.ExecContext(ctx, `INSERT INTO writes (epoch, what) VALUES (6, 'after refusal')`); err == nil {
		t.Error("a statement after the refusal ran")
	}
	if err := txN.Commit(); err == nil {
		t.Error("the refused transaction committed")
	}

	// With Run, a holder whose turn has passed never runs its function at all.
	ran := false
	err = f.Run(ctx, db, token(6), func(context.Context, *sql.Tx) error { ran = true; return nil })
	checkStale(t, err, 6, 7)
	if ran {
		t.Error("Run ran the function of a stale holder")
	}

	want := []row{{5, "first"}, {7, "new holder"}}
	if diff := cmp.Diff(want, writes(t, db)); diff != "" {
		t.Errorf("committed writes (-want +got):\n%s", diff)
	}
	if got := epochOf(t, db, f); got != 7 {
		t.Errorf("fence epoch %d, want 7", got)
	}
}

// TestHolderInsideTransactionBlocksSuccessor: once holder N has raised the fence, its transaction holds
// the fence row: N+1's raise waits until N commits, so N's writes land before N+1's, never after.
func TestHolderInsideTransactionBlocksSuccessor(t *testing.T) {
	db, f := setup(t, sqlfence.Options{})
	ctx := t.Context()
	inside, resume := make(chan int), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(resume) }) }
	defer free()
	errN := make(chan error, 1)
	go func() {
		errN <- f.Run(ctx, db, token(6), func(ctx context.Context, tx *sql.Tx) error {
			var pid int
			if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				return err
			}
			inside <- pid
			<-resume
			return write(6, "N")(ctx, tx)
		})
	}()
	<-inside
	errN1 := make(chan error, 1)
	go func() { errN1 <- f.Run(ctx, db, token(7), write(7, "N+1")) }()
	waitUntil(t, "N+1's raise waits for N's lock", func() bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE %fencekit_fences%'`).Scan(&n)
		return err == nil && n == 1
	})
	free()
	if err := <-errN; err != nil {
		t.Fatalf("holder N: %v", err)
	}
	if err := <-errN1; err != nil {
		t.Fatalf("holder N+1: %v", err)
	}
	if diff := cmp.Diff([]row{{6, "N"}, {7, "N+1"}}, writes(t, db)); diff != "" {
		t.Errorf("committed writes (-want +got):\n%s", diff)
	}
}

// TestIdleTimeoutFreesTheFence: a holder paused inside its transaction is ended by the server after
// Options.IdleTimeout, so its successor proceeds, and the paused holder's writes are not kept.
func TestIdleTimeoutFreesTheFence(t *testing.T) {
	db, f := setup(t, sqlfence.Options{IdleTimeout: 200 * time.Millisecond})
	ctx := t.Context()
	inside, resume := make(chan struct{}), make(chan struct{})
	errN := make(chan error, 1)
	go func() {
		errN <- f.Run(ctx, db, token(6), func(ctx context.Context, tx *sql.Tx) error {
			if err := write(6, "paused")(ctx, tx); err != nil {
				return err
			}
			close(inside)
			<-resume // paused until the successor has committed
			return nil
		})
	}()
	<-inside
	// Without the idle timeout the successor would wait for the paused holder for ever: bound the test.
	bounded, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err := f.Run(bounded, db, token(7), write(7, "successor"))
	close(resume)
	if err != nil {
		t.Fatalf("successor: %v", err)
	}
	if err := <-errN; err == nil {
		t.Fatal("the paused holder's transaction committed after its session was ended")
	}
	if diff := cmp.Diff([]row{{7, "successor"}}, writes(t, db)); diff != "" {
		t.Errorf("committed writes (-want +got):\n%s", diff)
	}
	if got := epochOf(t, db, f); got != 7 {
		t.Errorf("fence epoch %d, want 7", got)
	}
}

// TestConcurrentHolders: many holders with random epochs race at each isolation level. Whatever the
// interleaving, the fence ends at the highest committed epoch, the committed writes are in non-decreasing
// epoch order, exactly the transactions Run reported as committed are kept, and every refusal is stale.
func TestConcurrentHolders(t *testing.T) {
	for _, tc := range []struct {
		name string
		iso  sql.IsolationLevel
	}{
		{"read committed", sql.LevelReadCommitted},
		{"repeatable read", sql.LevelRepeatableRead},
		{"serializable", sql.LevelSerializable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const holders = 24
			db, f := setup(t, sqlfence.Options{Isolation: tc.iso, Attempts: 4 * holders})
			db.SetMaxOpenConns(holders + 2)
			ctx := t.Context()
			epochs := make([]int64, holders)
			for i := range epochs {
				epochs[i] = 1 + rand.Int64N(10)
			}
			errs := make([]error, holders)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range holders {
				wg.Go(func() {
					<-start
					errs[i] = f.Run(ctx, db, token(epochs[i]), write(epochs[i], "h"+itoa(int64(i))))
				})
			}
			close(start)
			wg.Wait()

			var committed []int64
			var maxCommitted int64
			for i, err := range errs {
				switch {
				case err == nil:
					committed = append(committed, epochs[i])
					maxCommitted = max(maxCommitted, epochs[i])
				case fencing.IsStale(err):
					var fe *fencing.Error
					errors.As(err, &fe)
					if fe.Epoch != epochs[i] || fe.LeaseEpoch <= fe.Epoch {
						t.Errorf("holder %d at epoch %d: refusal names epoch %d below fence epoch %d", i, epochs[i], fe.Epoch, fe.LeaseEpoch)
					}
				default:
					t.Errorf("holder %d at epoch %d: %v", i, epochs[i], err)
				}
			}
			if top := slices.Max(epochs); maxCommitted != top {
				t.Errorf("highest committed epoch %d, want the highest epoch %d (a holder of it must always commit)", maxCommitted, top)
			}
			if got := epochOf(t, db, f); got != maxCommitted {
				t.Errorf("fence epoch %d, want the highest committed epoch %d", got, maxCommitted)
			}
			got := writes(t, db)
			var gotEpochs []int64
			for i, w := range got {
				gotEpochs = append(gotEpochs, w.Epoch)
				if i > 0 && w.Epoch < got[i-1].Epoch {
					t.Errorf("write %d at epoch %d committed after a write at epoch %d", i, w.Epoch, got[i-1].Epoch)
				}
			}
			slices.Sort(committed)
			slices.Sort(gotEpochs)
			if diff := cmp.Diff(committed, gotEpochs); diff != "" {
				t.Errorf("kept writes differ from the transactions Run reported committed (-reported +kept):\n%s", diff)
			}
			t.Logf("%d of %d holders committed, epochs %v", len(committed), holders, committed)
		})
	}
}

// TestSnapshotOlderThanRaise: under REPEATABLE READ, a holder whose snapshot predates its successor's
// commit gets a serialization failure, not a silent success; retried, it is refused as stale.
func TestSnapshotOlderThanRaise(t *testing.T) {
	db, f := setup(t, sqlfence.Options{})
	ctx := t.Context()
	if err := f.Run(ctx, db, token(5), write(5, "first")); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // after a commit, sql.ErrTxDone
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM writes`).Scan(&n); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	if err := f.Run(ctx, db, token(7), write(7, "successor")); err != nil {
		t.Fatal(err)
	}
	err = f.Raise(ctx, tx, token(6))
	if !sqlfence.IsSerializationFailure(err) || fencing.IsStale(err) {
		t.Fatalf("raise from a snapshot older than the successor's commit: got %v, want a serialization failure", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rolling back the refused raise's transaction: %v", err)
	}
	// The retry, in a new transaction, sees the successor and is refused.
	err = f.Run(ctx, db, token(6), write(6, "paused"))
	checkStale(t, err, 6, 7)
}

// TestConnectionDropped: the server ends the holder's session after its writes and before its commit.
// Nothing is committed and the fence is not raised; the next transaction gets a fresh connection.
func TestConnectionDropped(t *testing.T) {
	db, f := setup(t, sqlfence.Options{})
	ctx := t.Context()
	if err := f.Run(ctx, db, token(3), write(3, "before")); err != nil {
		t.Fatal(err)
	}
	admin, _ := pg.Database(t) // another database, same server: pg_terminate_backend works across them
	err := f.Run(ctx, db, token(4), func(ctx context.Context, tx *sql.Tx) error {
		if err := write(4, "dropped")(ctx, tx); err != nil {
			return err
		}
		var pid int
		if err := tx.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		var ok bool
		if err := admin.QueryRowContext(ctx, `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
			t.Errorf("terminating backend %d: %v %v", pid, ok, err)
		}
		return nil // commit on a dead connection
	})
	if err == nil || fencing.IsFenced(err) {
		t.Fatalf("commit on a terminated connection: got %v, want a connection error", err)
	}
	if diff := cmp.Diff([]row{{3, "before"}}, writes(t, db)); diff != "" {
		t.Errorf("committed writes (-want +got):\n%s", diff)
	}
	if got := epochOf(t, db, f); got != 3 {
		t.Errorf("fence epoch %d after the dropped transaction, want 3", got)
	}
	if err := f.Run(ctx, db, token(4), write(4, "retried")); err != nil {
		t.Fatalf("retrying on a new connection: %v", err)
	}
}

// TestMissingFence: a fence name that does not exist is an error, never a silent create, unless the caller
// asked for creation.
func TestMissingFence(t *testing.T) {
	db, _ := setup(t, sqlfence.Options{})
	ctx := t.Context()
	typo, err := sqlfence.New("ordres", sqlfence.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = typo.Run(ctx, db, token(5), func(context.Context, *sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, sqlfence.ErrFenceNotFound) || !strings.Contains(err.Error(), "ordres") {
		t.Fatalf("got %v, want ErrFenceNotFound naming the fence", err)
	}
	if ran {
		t.Error("the function ran without a fence")
	}
	if _, err := typo.Epoch(ctx, db); !errors.Is(err, sqlfence.ErrFenceNotFound) {
		t.Errorf("Epoch of a missing fence: got %v, want ErrFenceNotFound", err)
	}

	create, err := sqlfence.New("ordres", sqlfence.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := create.Run(ctx, db, token(5), write(5, "created")); err != nil {
		t.Fatal(err)
	}
	if got := epochOf(t, db, create); got != 5 {
		t.Errorf("created fence at epoch %d, want 5", got)
	}
	if err := create.Run(ctx, db, token(4), write(4, "stale")); !fencing.IsStale(err) {
		t.Errorf("a created fence admitted a lower epoch: %v", err)
	}
}

// TestBadEpochs: epochs no elector issues are refused before any statement reaches the database (the
// handle is closed: touching it would fail differently); the bounds themselves are admitted.
func TestBadEpochs(t *testing.T) {
	db, f := setup(t, sqlfence.Options{})
	closed, _ := pg.Database(t)
	closed.Close()
	for _, tc := range []struct {
		epoch  int64
		reason protocol.Reason
	}{
		{0, protocol.ReasonInvalid},
		{-1, protocol.ReasonInvalid},
		{math.MinInt64, protocol.ReasonInvalid},
		{protocol.MaxEpoch + 1, protocol.ReasonFutureEpoch},
		{math.MaxInt64, protocol.ReasonFutureEpoch},
	} {
		err := f.Run(t.Context(), closed, token(tc.epoch), write(tc.epoch, "bad"))
		if got := fencing.ReasonOf(err); got != tc.reason || !strings.Contains(err.Error(), itoa(tc.epoch)) {
			t.Errorf("Run at epoch %d: got %v (reason %q), want reason %s naming the epoch", tc.epoch, err, got, tc.reason)
		}
		if err := f.Raise(t.Context(), closed, token(tc.epoch)); fencing.ReasonOf(err) != tc.reason {
			t.Errorf("Raise at epoch %d: got %v, want reason %s", tc.epoch, err, tc.reason)
		}
	}
	for _, e := range []int64{1, protocol.MaxEpoch} {
		if err := f.Run(t.Context(), db, token(e), write(e, "bound")); err != nil {
			t.Errorf("Run at epoch %d: %v", e, err)
		}
	}
	if got := epochOf(t, db, f); got != protocol.MaxEpoch {
		t.Errorf("fence epoch %d, want %d", got, protocol.MaxEpoch)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyWithin(t, 20*time.Second, what, func() (bool, string) { return cond(), "" })
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }
