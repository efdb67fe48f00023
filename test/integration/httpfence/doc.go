// Package httpfence tests pkg/fencing/httpfence on a real PostgreSQL server (test/util/pgtest, one server
// for the package, a database per test): the PostgresStore commits a handler's write with the raise of its
// key's epoch or not at all, orders the handlers of one key, and the Middleware's guarantees (handlers in
// epoch order under racing requests, a panicking handler releasing its key) hold for both stores, in
// memory and on PostgreSQL. The tests that need no server (the header, the Transport, the Middleware's
// refusals on the memory store) are in pkg/fencing/httpfence.
package httpfence
