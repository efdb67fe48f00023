// Package fencing is what a lease holder uses to write FencedResources safely, and what fencekit's
// admission uses to decide whether a write is fenced.
//
// A FencedResource admits a write that sets or changes spec.data or spec.epoch only if the write carries
// the bound Lease's current epoch, the Lease has a live holder, the write names that holder, and it comes
// from the user that acquired the Lease at that epoch. The apiserver itself (the CRD's CEL rule) refuses any
// epoch below the stored one, atomically with the write.
//
// Users need three things from this package:
//
//   - NewWriter: performs fenced updates of a FencedResource's data with the elector's Token, retrying
//     resourceVersion conflicts within the same epoch and never across epochs.
//   - FenceOnAcquire: an elector.Config.PostAcquire hook that raises every FencedResource bound to the
//     Lease to the new epoch before the elector reports leadership, so that a paused former holder's
//     delayed write is refused even if the new holder never writes.
//   - IsStale, IsNotHolder, IsLeaseMissing: classify the errors of a refused write.
package fencing
