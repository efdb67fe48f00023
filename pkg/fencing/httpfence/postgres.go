package httpfence

import (
	"context"
	"database/sql"
	"errors"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// PostgresStore is a Store on PostgreSQL: each key is a fence of package sqlfence (a row of its fence
// table, named by the key). Admit runs fn inside the fenced transaction, after the raise; the handler
// reaches that transaction with Tx(ctx), and what it writes through it commits atomically with the raise,
// or not at all. A handler response with a status of 400 or more, an error, a panic or a failed commit
// rolls the transaction back (the raise included).
type PostgresStore struct {
	db   *sql.DB
	opts sqlfence.Options
}

var _ Store = (*PostgresStore)(nil)

// NewPostgresStore returns a store on db, with fences in opts.Table (sqlfence.DefaultTable when empty).
// A key with no fence is refused with sqlfence.ErrFenceNotFound unless opts.Create. opts.Attempts is
// ignored: a handler runs at most once per request, so a serialization failure (REPEATABLE READ,
// SERIALIZABLE) is answered with 503 for the client to retry.
func NewPostgresStore(db *sql.DB, opts sqlfence.Options) (*PostgresStore, error) {
	opts.Attempts = 1
	if _, err := sqlfence.New("probe", opts); err != nil { // validates the table name once
		return nil, err
	}
	return &PostgresStore{db: db, opts: opts}, nil
}

// Fence is the sqlfence.Fence that fences key (to create it, read it, or raise it in your own transaction).
func (s *PostgresStore) Fence(key string) (*sqlfence.Fence, error) {
	f, err := sqlfence.New(key, s.opts)
	if err != nil {
		return nil, &fencing.Error{Reason: protocol.ReasonInvalid, Resource: key, Message: "fenced key " + quote(key) + ": " + err.Error()}
	}
	return f, nil
}

// Admit implements Store.
func (s *PostgresStore) Admit(ctx context.Context, key string, token elector.Token, fn func(ctx context.Context) error) error {
	f, err := s.Fence(key)
	if err != nil {
		return err
	}
	err = f.Run(ctx, s.db, token, func(ctx context.Context, tx *sql.Tx) error {
		return fn(context.WithValue(ctx, txKey{}, tx))
	})
	var fe *fencing.Error
	if errors.As(err, &fe) && fe.Reason == protocol.ReasonStale {
		return staleKey(key, token, fe.LeaseEpoch) // the same words as the memory store's
	}
	return err
}

type txKey struct{}

// Tx returns the transaction a PostgresStore runs the request's handler in, or nil (another Store, or a
// context not from Middleware). Statements run through it commit only together with the fence's raise.
func Tx(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(txKey{}).(*sql.Tx)
	return tx
}
