// Package sqlfence tests pkg/fencing/sqlfence on a real PostgreSQL server (test/util/pgtest, one server for
// the package, a database per test): a paused holder's transaction refused after its successor's, a holder
// inside its transaction blocking its successor, the idle timeout, concurrent holders at each isolation
// level, a snapshot older than the raise, a dropped connection, a missing fence, the bounds of the epoch,
// and the per-row fence (Row.Check). The checks that need no server (names) are in pkg/fencing/sqlfence.
package sqlfence
