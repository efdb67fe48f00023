package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// ErrRowNotFound means a row-level fenced update matched no row because the row does not exist.
var ErrRowNotFound = errors.New("row not found")

// Row is a fence kept on the user's own rows: a bigint column (Epoch) that every fenced write sets to its
// epoch, conditionally:
//
//	UPDATE orders SET status = $3, fence_epoch = $1 WHERE id = $2 AND fence_epoch <= $1
//
// The condition is evaluated by the database on the row it writes, atomically with the write, so no lock
// and no transaction are needed for a single-row write. When such an update affects no row, Check says why.
type Row struct {
	// Table is the user's table, Key its key column, Epoch the fence column (lower-case identifiers).
	Table, Key, Epoch string
}

// Check turns the result of a conditional update into an error: nil if it affected a row; otherwise it
// reads the row's fence column (in q, the same transaction if there is one) and returns a *fencing.Error
// of ReasonStale (IsStale) naming the row, the epoch and the row's epoch, ErrRowNotFound if the row does
// not exist, or an error if the row reads as admissible (a concurrent change: fail closed). Except for
// ErrRowNotFound, a refusal also aborts q's transaction, if q is one (see Fence.Raise).
func (r Row) Check(ctx context.Context, q Querier, res sql.Result, key any, epoch int64) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fenced update of %s %v: %w", r.Table, key, err)
	}
	if n > 0 {
		return nil
	}
	table, err := quoteTable(r.Table)
	if err != nil {
		return err
	}
	for _, c := range []string{r.Key, r.Epoch} {
		if !column.MatchString(c) {
			return fmt.Errorf("column %q is not a lower-case SQL identifier", c)
		}
	}
	resource := fmt.Sprintf("%s %s=%v", r.Table, r.Key, key)
	var stored sql.NullInt64
	err = q.QueryRowContext(ctx, `SELECT "`+r.Epoch+`" FROM `+table+` WHERE "`+r.Key+`" = $1`, key).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("fenced update of %s at epoch %d: %w", resource, epoch, ErrRowNotFound)
	case err != nil:
		return fmt.Errorf("reading the fence column %s of %s: %w", r.Epoch, resource, err)
	case stored.Valid && stored.Int64 > epoch:
		abort(ctx, q)
		return &fencing.Error{Reason: protocol.ReasonStale, Resource: resource, Epoch: epoch, LeaseEpoch: stored.Int64,
			Message: fmt.Sprintf("stale epoch %d: %s was written at epoch %d", epoch, resource, stored.Int64)}
	}
	abort(ctx, q)
	return fmt.Errorf("fenced update of %s at epoch %d matched no row, though its %s reads %v: refusing (a NULL fence column never matches: default it to 0)",
		resource, epoch, r.Epoch, stored)
}
