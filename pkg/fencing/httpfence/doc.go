// Package httpfence fences writes made over HTTP: a client presents its fencing token in a request header,
// and the service refuses requests whose epoch is below the highest it has admitted for the key written.
//
// # The header (docs/choosing.md specifies it for services in other languages)
//
//	Fencing-Token: 7                      required, exactly once: a decimal epoch in [1, 2^53-1], digits only
//	Fencing-Lease: default/orders-writer  optional, at most once: the Lease the epoch belongs to (diagnostics)
//
// A missing, repeated or malformed Fencing-Token ("007", "+7", "-1", "0", "1e3", "9007199254740992") is
// answered 400; a stale epoch 409; both with a JSON Refusal naming the header or key and the numbers.
//
// # What Middleware guarantees
//
// For each fenced key (KeyFunc), with a Store that keeps the highest admitted epoch:
//
//   - A request whose epoch is below an epoch already admitted for the key never reaches the handler: it
//     gets 409.
//   - Admitted requests' handlers run one at a time per key, each after its raise, so they run in
//     non-decreasing epoch order. This is what makes a check before the handler safe: a stale request that
//     was admitted before the newer holder's first request has finished its handler before the newer
//     holder's handler starts; it cannot write after it. (A middleware that raised and then released the
//     key before calling the handler would not guarantee this: the stale request, admitted first, could be
//     overtaken by a newer request and then write over it.)
//   - With PostgresStore, the handler runs inside the fenced transaction: writes it makes through Tx(ctx)
//     commit together with the raise, or not at all, and the response is sent only after the commit (503
//     if it fails). The raise is undone when the handler answers 400 or more.
//
// What is not guaranteed: writes a handler makes outside the store's transaction (another database, a file,
// an outgoing call) are ordered by the key's serialisation but not atomic with the raise: if the service
// dies after such a write and before the raise is committed, the raise is lost. MemoryStore forgets
// everything on restart. Requests to different keys are not ordered with each other. The token is not a
// credential: a client can send any epoch, so authenticate clients separately; fencing protects against
// stale holders, not against liars.
//
// # The client side
//
// Transport adds the current token to every request (from a func, typically the elector's Token method, so
// it follows re-acquisitions) and refuses to send when there is no token. ResponseError turns a refusal back
// into a *fencing.Error, so fencing.IsStale works on the client.
package httpfence
