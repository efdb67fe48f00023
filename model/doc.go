// Package model runs spin on fencekit.pml, the Promela model of fencekit's protocol (docs/model.md):
// the Lease and its elector, fence-on-acquire, the admission decision with the webhook's copy of the Lease
// and its quorum read, the objects a FencingPolicy covers, and the actors without the token.
//
// A Check is one spin run: the model compiled with some -D flags (a configuration, a mutation), explored
// exhaustively, and the outcome it must have. The design's checks must find no violation; each mutation's
// check must find one, whose trail Story prints as a readable story. cmd/model (make model) runs them all;
// test/model's test runs those not marked slow, so that `make test` keeps the model honest.
package model
