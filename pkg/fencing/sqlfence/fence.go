package sqlfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// DefaultTable is the table fences are kept in unless Options.Table names another.
const DefaultTable = "fencekit_fences"

// maxNameBytes bounds a fence name.
const maxNameBytes = 256

// ErrFenceNotFound means the named fence does not exist in the table. Create it (Fence.Create, or
// Options.Create to create it on its first raise); fencekit never creates one silently, because a typo in a
// fence name would otherwise give a new, empty fence that admits any epoch.
var ErrFenceNotFound = errors.New("fence not found")

// Querier is what the fence needs to run its statements: a *sql.Tx, *sql.Conn or *sql.DB.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Options configures a Fence. The zero value is the default table, no creation, the server's default
// isolation level (READ COMMITTED unless configured otherwise) and one attempt.
type Options struct {
	// Table is the fence table: a lower-case identifier, optionally schema-qualified ("ops.fences").
	// DefaultTable when empty.
	Table string
	// Create makes a raise of a fence that does not exist create it at the token's epoch, instead of
	// failing with ErrFenceNotFound.
	Create bool
	// Isolation is the isolation level of the transactions Run begins. READ COMMITTED suffices for the
	// fence; the user's own statements may need more (see the package documentation).
	Isolation sql.IsolationLevel
	// Attempts is how many times Run runs a transaction that fails with a serialization failure or a
	// deadlock (SQLSTATE 40001 or 40P01), which REPEATABLE READ and SERIALIZABLE report when a concurrent
	// transaction raised the fence first. Each attempt runs fn again in a new transaction. 0 means 1.
	Attempts int
	// IdleTimeout, when > 0, sets idle_in_transaction_session_timeout for Run's transactions: the server
	// ends the session of a holder that stays idle inside its transaction (paused, for example) for
	// longer, which rolls its transaction back and frees the fence row for the next holder. Choose it
	// well below the lease duration.
	IdleTimeout time.Duration
}

// Fence is one named fence: a row of the fence table holding the highest epoch admitted under that name.
// A Fence is a description, safe for concurrent use; it holds no connection.
type Fence struct {
	name  string
	table string // quoted
	opts  Options
}

var (
	identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}(\.[a-z_][a-z0-9_]{0,62})?$`)
	column     = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// quoteTable validates a table name ("name" or "schema.name", lower-case identifiers) and quotes it.
func quoteTable(table string) (string, error) {
	if !identifier.MatchString(table) {
		return "", fmt.Errorf("table %q is not a lower-case SQL identifier, optionally schema-qualified (want e.g. %s or ops.fences)", table, DefaultTable)
	}
	return `"` + strings.ReplaceAll(table, ".", `"."`) + `"`, nil
}

// New describes the fence name in the table opts.Table. It fails for an empty name, one over maxNameBytes,
// one that is not valid UTF-8 or contains a NUL byte, and for an invalid table name.
func New(name string, opts Options) (*Fence, error) {
	switch {
	case name == "":
		return nil, errors.New("fence name is empty")
	case len(name) > maxNameBytes:
		return nil, fmt.Errorf("fence name is %d bytes, over the bound of %d", len(name), maxNameBytes)
	case !utf8.ValidString(name) || containsNUL(name):
		return nil, fmt.Errorf("fence name %q is not valid UTF-8 text without NUL bytes", name)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	table, err := quoteTable(opts.Table)
	if err != nil {
		return nil, err
	}
	if opts.Attempts < 1 {
		opts.Attempts = 1
	}
	return &Fence{name: name, table: table, opts: opts}, nil
}

func containsNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

// Name is the fence's name.
func (f *Fence) Name() string { return f.name }

// CreateTable creates the fence table if it does not exist. The epoch column is bounded to
// [0, protocol.MaxEpoch] by a CHECK constraint, so no write can store an epoch fencekit never issues.
func (f *Fence) CreateTable(ctx context.Context, q Querier) error {
	_, err := q.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+f.table+` (
	name text PRIMARY KEY CHECK (name <> '' AND octet_length(name) <= `+strconv.Itoa(maxNameBytes)+`),
	epoch bigint NOT NULL CHECK (epoch BETWEEN 0 AND `+strconv.FormatInt(protocol.MaxEpoch, 10)+`),
	holder text,
	lease text,
	updated_at timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return fmt.Errorf("creating fence table %s: %w", f.opts.Table, err)
	}
	return nil
}

// Create creates the fence at epoch 0 (which admits any valid epoch) if it does not exist. An existing
// fence is left as it is.
func (f *Fence) Create(ctx context.Context, q Querier) error {
	_, err := q.ExecContext(ctx, `INSERT INTO `+f.table+` (name, epoch) VALUES ($1, 0) ON CONFLICT (name) DO NOTHING`, f.name)
	if err != nil {
		return fmt.Errorf("creating fence %s: %w", f.name, err)
	}
	return nil
}

// Epoch reads the highest epoch the fence has admitted (0 for a fence never raised). It fails with
// ErrFenceNotFound if the fence does not exist.
func (f *Fence) Epoch(ctx context.Context, q Querier) (int64, error) {
	s, err := f.read(ctx, q)
	if err != nil {
		return 0, err
	}
	return s.epoch, nil
}

type state struct {
	epoch         int64
	holder, lease sql.NullString
}

func (f *Fence) read(ctx context.Context, q Querier) (state, error) {
	var s state
	err := q.QueryRowContext(ctx, `SELECT epoch, holder, lease FROM `+f.table+` WHERE name = $1`, f.name).Scan(&s.epoch, &s.holder, &s.lease)
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("fence %s in table %s: %w (create it with Fence.Create, or set Options.Create)", f.name, f.opts.Table, ErrFenceNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("reading fence %s: %w", f.name, err)
	}
	return s, nil
}

// CheckEpoch refuses an epoch that no fencekit elector issues, before anything is sent to a database: one
// below 1 (ReasonInvalid) or above protocol.MaxEpoch (ReasonFutureEpoch). resource names what the epoch was
// meant for, in the error.
func CheckEpoch(resource string, epoch int64) error {
	switch {
	case epoch < 1:
		return &fencing.Error{Reason: protocol.ReasonInvalid, Resource: resource, Epoch: epoch,
			Message: fmt.Sprintf("%s: epoch %d is not a fencing epoch: epochs start at 1 (a zero epoch means no leadership)", resource, epoch)}
	case epoch > protocol.MaxEpoch:
		return &fencing.Error{Reason: protocol.ReasonFutureEpoch, Resource: resource, Epoch: epoch,
			Message: fmt.Sprintf("%s: epoch %d was never issued: fencekit epochs are at most %d", resource, epoch, protocol.MaxEpoch)}
	}
	return nil
}

// Raise checks and raises the fence to token.Epoch inside the caller's transaction tx: it admits the
// token if the fence's stored epoch is at most token.Epoch, stores token.Epoch (and the holder and lease),
// and leaves the fence row locked until tx ends, so a concurrent transaction raising the same fence waits
// for tx to commit or roll back. It refuses a lower epoch with a *fencing.Error of ReasonStale (IsStale)
// naming both epochs and the fence, and then aborts tx in the database (PostgreSQL refuses every further
// statement in it and turns its commit into a rollback), so that a caller that ignores the error still
// cannot commit what it wrote; roll tx back. A missing fence (ErrFenceNotFound) aborts tx too. Raise
// validates the epoch before touching the database.
//
// Raise must run in a transaction (a *sql.Tx): on an autocommit connection the lock ends with the statement
// and the user's writes are not atomic with the check.
func (f *Fence) Raise(ctx context.Context, tx Querier, token elector.Token) error {
	if err := CheckEpoch("fence "+f.name, token.Epoch); err != nil {
		return err
	}
	lease := ""
	if token.Lease.Name != "" {
		lease = token.Lease.String()
	}
	var query string
	if f.opts.Create {
		query = `INSERT INTO ` + f.table + ` AS f (name, epoch, holder, lease, updated_at) VALUES ($2, $1, $3, $4, now())
ON CONFLICT (name) DO UPDATE SET epoch = EXCLUDED.epoch, holder = EXCLUDED.holder, lease = EXCLUDED.lease, updated_at = EXCLUDED.updated_at
WHERE f.epoch <= EXCLUDED.epoch`
	} else {
		query = `UPDATE ` + f.table + ` SET epoch = $1, holder = $3, lease = $4, updated_at = now() WHERE name = $2 AND epoch <= $1`
	}
	res, err := tx.ExecContext(ctx, query, token.Epoch, f.name, nullable(token.Holder), nullable(lease))
	if err != nil {
		return fmt.Errorf("raising fence %s to epoch %d: %w", f.name, token.Epoch, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("raising fence %s to epoch %d: %w", f.name, token.Epoch, err)
	}
	if n == 1 {
		return nil
	}
	// No row raised: the fence is missing or above the token. Read it (READ COMMITTED: the latest
	// committed version; the statement above waited for any transaction holding the row) to say which.
	s, err := f.read(ctx, tx)
	if err != nil {
		abort(ctx, tx)
		return err
	}
	abort(ctx, tx)
	if s.epoch > token.Epoch {
		by := ""
		if s.holder.Valid {
			by = ", by holder " + s.holder.String
		}
		if s.lease.Valid {
			by += " of lease " + s.lease.String
		}
		return &fencing.Error{Reason: protocol.ReasonStale, Resource: f.name, Lease: lease, Epoch: token.Epoch, LeaseEpoch: s.epoch,
			Message: fmt.Sprintf("stale epoch %d: fence %s has admitted epoch %d%s", token.Epoch, f.name, s.epoch, by)}
	}
	// Fail closed: the conditional raise matched nothing yet the fence reads as admissible (possible only if
	// someone lowered the fence by hand, or under a snapshot that predates it).
	return fmt.Errorf("raising fence %s to epoch %d: no row was raised, though the fence reads epoch %d: refusing; retry in a new transaction", f.name, token.Epoch, s.epoch)
}

// abort puts the caller's transaction in PostgreSQL's aborted state after a refusal: a caller that
// ignores the refusal and commits gets a rollback (and an error), never a commit of what it wrote. On an
// autocommit connection it is a harmless failed statement.
func abort(ctx context.Context, q Querier) {
	_, _ = q.ExecContext(ctx, `DO $fencekit$ BEGIN RAISE EXCEPTION 'fencekit: the fence refused this transaction; roll it back'; END $fencekit$`)
}

func nullable(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Run runs fn in a transaction fenced by token: it begins a transaction on db at Options.Isolation, raises
// the fence (Raise) before anything else, runs fn with the transaction, and commits. If the fence refuses
// the token, fn never runs and Run returns the stale error; if fn returns an error or panics, or the commit
// fails, the transaction is rolled back and nothing fn wrote is kept, nor is the fence raised. fn's
// statements must go through tx (ctx is the one Run was given). Serialization failures and deadlocks are
// retried up to Options.Attempts times, running fn again each time: fn must not have effects outside tx.
func (f *Fence) Run(ctx context.Context, db *sql.DB, token elector.Token, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := CheckEpoch("fence "+f.name, token.Epoch); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := f.runOnce(ctx, db, token, fn)
		if err == nil || attempt >= f.opts.Attempts || !IsSerializationFailure(err) || ctx.Err() != nil {
			return err
		}
	}
}

func (f *Fence) runOnce(ctx context.Context, db *sql.DB, token elector.Token, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: f.opts.Isolation})
	if err != nil {
		return fmt.Errorf("fence %s: beginning a transaction: %w", f.name, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if f.opts.IdleTimeout > 0 {
		ms := strconv.FormatInt(max(1, f.opts.IdleTimeout.Milliseconds()), 10)
		if _, err := tx.ExecContext(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`, ms); err != nil {
			return fmt.Errorf("fence %s: setting idle_in_transaction_session_timeout: %w", f.name, err)
		}
	}
	if err := f.Raise(ctx, tx, token); err != nil {
		return err
	}
	if err := fn(ctx, tx); err != nil {
		return err
	}
	committed = true // a failed Commit has ended the transaction too
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence %s: committing at epoch %d: %w", f.name, token.Epoch, err)
	}
	return nil
}

// IsSerializationFailure reports whether err is a PostgreSQL serialization failure (SQLSTATE 40001) or
// deadlock (40P01): the transaction was rolled back and may succeed if run again.
func IsSerializationFailure(err error) bool {
	var s interface{ SQLState() string }
	if !errors.As(err, &s) {
		return false
	}
	code := s.SQLState()
	return code == "40001" || code == "40P01"
}
