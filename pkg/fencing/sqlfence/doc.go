// Package sqlfence fences writes to PostgreSQL with fencekit tokens, in two ways.
//
// # Fenced transactions (Fence)
//
// A fence is a named row of a small table (DefaultTable, created by Fence.CreateTable):
//
//	fencekit_fences(name text PRIMARY KEY, epoch bigint NOT NULL CHECK (epoch BETWEEN 0 AND 2^53-1),
//	                holder text, lease text, updated_at timestamptz)
//
// Fence.Run begins a transaction, raises the fence to the token's epoch as its first statement,
//
//	UPDATE fencekit_fences SET epoch = $epoch, ... WHERE name = $name AND epoch <= $epoch
//
// runs the caller's function with the transaction, and commits. What is guaranteed, for every fence:
//
//   - A transaction commits through Run (or through Raise in the caller's own transaction) only if no
//     transaction that committed before it raised the fence to a higher epoch. A stale holder's transaction
//     is refused with a *fencing.Error of reason protocol.ReasonStale (fencing.IsStale), naming the fence,
//     the token's epoch (Epoch) and the fence's epoch (LeaseEpoch), and is rolled back: nothing it wrote in
//     the transaction is kept. Raise also aborts the transaction in the database, so even a caller that
//     ignores the error cannot commit it.
//   - The stored epoch never decreases, and the fenced transactions of one fence commit in non-decreasing
//     epoch order. The UPDATE takes the fence row's lock and holds it until commit, so a concurrent
//     transaction raising the same fence waits, then re-evaluates the condition on the committed row:
//     under READ COMMITTED it finds the higher epoch and is refused; under REPEATABLE READ and
//     SERIALIZABLE it gets a serialization failure (SQLSTATE 40001), which Run retries when
//     Options.Attempts > 1 and which then becomes a stale refusal or, for a higher epoch, a commit.
//   - The raise and the caller's writes commit or roll back together: a connection dropped before the
//     commit keeps neither.
//   - Epochs below 1 or above protocol.MaxEpoch are refused before any statement is sent; a fence that does
//     not exist is an error (ErrFenceNotFound) unless Options.Create asks to create it.
//
// READ COMMITTED suffices for the fence. Choose the isolation level for the caller's own statements:
// under READ COMMITTED each statement sees the latest committed data; writes made inside fenced
// transactions of the same fence are serialised by the fence row's lock, but writes to the same rows by
// transactions that do not raise the fence are not. Under REPEATABLE READ or SERIALIZABLE, set Attempts
// and keep fn free of effects outside the transaction, since it may run more than once.
//
// What is not guaranteed: anything written outside the transaction (another database, a file, an HTTP
// call) is not fenced by it. A holder paused while its transaction holds the fence row blocks the next
// holder's raise until it resumes and commits (its writes then commit before the next holder's, which is
// still ordered) or its session is ended: Options.IdleTimeout bounds that wait.
//
// # Row-level fences (Row)
//
// When each write touches one row, a fence column on the user's own table does the same job without a
// separate fence or transaction: "UPDATE t SET ..., fence_epoch = $epoch WHERE id = $id AND fence_epoch <=
// $epoch". The database evaluates the condition on the row it writes, atomically. Row.Check turns "no row
// affected" into the typed stale error (or ErrRowNotFound). See docs/choosing.md for which to use.
//
// The package uses only database/sql; it is tested with PostgreSQL through pgx's database/sql driver
// (github.com/jackc/pgx/v5/stdlib), and needs a driver whose errors expose SQLSTATE codes (SQLState())
// for retries.
package sqlfence
