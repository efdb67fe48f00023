package sqlfence_test

import (
	"database/sql"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
)

var orders = sqlfence.Row{Table: "orders", Key: "id", Epoch: "fence_epoch"}

// setStatus is the row-level pattern: one conditional UPDATE, no transaction, no lock. history records
// the epochs of the writes the row admitted, in the order it admitted them.
const setStatus = `UPDATE orders SET status = $3, fence_epoch = $1, history = history || $1
	WHERE id = $2 AND fence_epoch <= $1`

func setupOrders(t *testing.T) *sql.DB {
	t.Helper()
	db, _ := pg.Database(t)
	mustExec(t, db, `CREATE TABLE orders (id int PRIMARY KEY, status text, fence_epoch bigint NOT NULL DEFAULT 0,
		history bigint[] NOT NULL DEFAULT '{}')`)
	mustExec(t, db, `INSERT INTO orders (id, status) VALUES (1, 'new')`)
	return db
}

// TestRowFence: a stale write to a row is refused by the database and reported as stale with both epochs;
// a missing row is told apart from a stale one.
func TestRowFence(t *testing.T) {
	db := setupOrders(t)
	ctx := t.Context()
	res, err := db.ExecContext(ctx, setStatus, 5, 1, "paid")
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.Check(ctx, db, res, 1, 5); err != nil {
		t.Fatalf("write at epoch 5: %v", err)
	}
	res, err = db.ExecContext(ctx, setStatus, 4, 1, "cancelled")
	if err != nil {
		t.Fatal(err)
	}
	err = orders.Check(ctx, db, res, 1, 4)
	var fe *fencing.Error
	if !fencing.IsStale(err) || !errors.As(err, &fe) || fe.Epoch != 4 || fe.LeaseEpoch != 5 ||
		!strings.Contains(err.Error(), "orders id=1") {
		t.Fatalf("write at epoch 4 after 5: got %v, want a stale refusal naming orders id=1, epochs 4 and 5", err)
	}
	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = 1`).Scan(&status); err != nil || status != "paid" {
		t.Errorf("status %q (%v), want the epoch-5 write's paid", status, err)
	}

	// Inside a transaction, a refusal aborts it: a caller that ignores the error keeps nothing.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // after a commit, sql.ErrTxDone
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES (3, 'by a stale holder')`); err != nil {
		t.Fatal(err)
	}
	res, err = tx.ExecContext(ctx, setStatus, 4, 1, "cancelled")
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.Check(ctx, tx, res, 1, 4); !fencing.IsStale(err) {
		t.Fatalf("stale write in a transaction: got %v", err)
	}
	if err := tx.Commit(); err == nil {
		t.Error("a transaction with a refused row write committed")
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = 3`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the stale transaction's insert was kept (%d rows, %v)", n, err)
	}

	res, err = db.ExecContext(ctx, setStatus, 6, 2, "paid")
	if err != nil {
		t.Fatal(err)
	}
	if err := orders.Check(ctx, db, res, 2, 6); !errors.Is(err, sqlfence.ErrRowNotFound) || fencing.IsStale(err) {
		t.Errorf("write to a missing row: got %v, want ErrRowNotFound", err)
	}
}

// TestRowFenceConcurrent: racing writers with random epochs on one row, without transactions: the row
// admits writes in non-decreasing epoch order and ends at the highest epoch; every refusal is stale.
func TestRowFenceConcurrent(t *testing.T) {
	db := setupOrders(t)
	ctx := t.Context()
	const writers = 32
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	top := int64(0)
	start := make(chan struct{})
	for range writers {
		epoch := 1 + rand.Int64N(12)
		top = max(top, epoch)
		wg.Go(func() {
			<-start
			res, err := db.ExecContext(ctx, setStatus, epoch, 1, "w")
			if err == nil {
				err = orders.Check(ctx, db, res, 1, epoch)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted++
			case !fencing.IsStale(err):
				t.Errorf("writer at epoch %d: %v", epoch, err)
			}
		})
	}
	close(start)
	wg.Wait()
	var history []int64
	var final int64
	rows, err := db.QueryContext(ctx, `SELECT fence_epoch, unnest(history) FROM orders WHERE id = 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var h int64
		if err := rows.Scan(&final, &h); err != nil {
			t.Fatal(err)
		}
		history = append(history, h)
	}
	if len(history) != admitted {
		t.Errorf("row recorded %d writes, %d were reported admitted", len(history), admitted)
	}
	for i := 1; i < len(history); i++ {
		if history[i] < history[i-1] {
			t.Errorf("row admitted epoch %d after epoch %d: %v", history[i], history[i-1], history)
		}
	}
	if final != top {
		t.Errorf("row at epoch %d, want the highest epoch %d", final, top)
	}
}
