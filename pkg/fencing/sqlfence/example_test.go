package sqlfence_test

import (
	"context"
	"database/sql"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
)

// A lease holder ships paid orders in one fenced transaction: if a newer holder has committed under the
// fence "orders", the transaction is refused and nothing is shipped twice.
func ExampleFence_Run() {
	var db *sql.DB        // sql.Open("pgx", dsn), with _ "github.com/jackc/pgx/v5/stdlib"
	var tok elector.Token // from elector.Config.OnStartedLeading
	ctx := context.Background()

	fence, err := sqlfence.New("orders", sqlfence.Options{})
	if err != nil {
		panic(err)
	}
	err = fence.Run(ctx, db, tok, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) SELECT id FROM orders WHERE paid AND NOT shipped`)
		return err
	})
	if fencing.IsStale(err) {
		return // a newer holder exists: stop working
	}
}

// One row, one statement: the fence column makes the UPDATE conditional, and Check reports why it
// matched nothing.
func ExampleRow_Check() {
	var db *sql.DB
	var tok elector.Token
	ctx := context.Background()
	orders := sqlfence.Row{Table: "orders", Key: "id", Epoch: "fence_epoch"}

	if err := sqlfence.CheckEpoch("orders 42", tok.Epoch); err != nil {
		return
	}
	res, err := db.ExecContext(ctx, `UPDATE orders SET status = 'shipped', fence_epoch = $1 WHERE id = $2 AND fence_epoch <= $1`, tok.Epoch, 42)
	if err == nil {
		err = orders.Check(ctx, db, res, 42, tok.Epoch)
	}
	if fencing.IsStale(err) {
		return
	}
}
