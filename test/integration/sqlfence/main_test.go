package sqlfence_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/test/util/pgtest"
)

var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

var lease = types.NamespacedName{Namespace: "default", Name: "orders-writer"}

func token(epoch int64) elector.Token {
	return elector.Token{Epoch: epoch, Lease: lease, Holder: fmt.Sprintf("worker-%d", epoch)}
}

// setup gives t a fresh database with the fence table, the fence "orders" created at epoch 0, and a
// table of writes (in insertion order) that fenced transactions append to.
func setup(t *testing.T, opts sqlfence.Options) (*sql.DB, *sqlfence.Fence) {
	t.Helper()
	db, _ := pg.Database(t)
	f, err := sqlfence.New("orders", opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := f.CreateTable(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := f.Create(ctx, db); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, `CREATE TABLE writes (id bigserial PRIMARY KEY, epoch bigint NOT NULL, what text)`)
	return db, f
}

func mustExec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// write is a fenced transaction's body: it appends one row to writes.
func write(epoch int64, what string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO writes (epoch, what) VALUES ($1, $2)`, epoch, what)
		return err
	}
}

type row struct {
	Epoch int64
	What  string
}

// writes returns the committed writes in the order they were made.
func writes(t *testing.T, db *sql.DB) []row {
	t.Helper()
	return pgtest.Rows(t, db, `SELECT epoch, what FROM writes ORDER BY id`, func(r *sql.Rows) (w row, err error) {
		err = r.Scan(&w.Epoch, &w.What)
		return w, err
	})
}

func epochOf(t *testing.T, db *sql.DB, f *sqlfence.Fence) int64 {
	t.Helper()
	e, err := f.Epoch(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
