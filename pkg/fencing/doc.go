// Package fencing is what a lease holder uses to write FencedResources and fenced objects safely.
//
// A FencedResource admits a write that sets or changes a fenced field (spec.data, spec.epoch, the writer
// annotation, the deletion marker, owner references) only if the request itself presents the bound
// Lease's current epoch as its field manager ("fencing.fencekit.io/epoch=N", never inherited from the
// stored object), the Lease is a fenced Lease with a live holder, the write sets spec.epoch to that epoch
// and names that holder, and it comes from the user that acquired the Lease at that epoch. The apiserver
// itself (the CRD's CEL rule) refuses any epoch below the stored one, atomically with the write. A delete
// under a live Lease needs the holder's deletion marker at the current epoch.
//
// Users need three things from this package:
//
//   - NewWriterForConfig (or NewWriter with a client of your own): performs fenced updates (Set, one
//     request per write; Update) and deletes (Delete) of a FencedResource with the elector's Token,
//     presenting it in every request and retrying resourceVersion conflicts within the same epoch, never
//     across epochs.
//   - FenceOnAcquireForConfig (or FenceOnAcquire with a client of your own): an elector.Config.PostAcquire
//     fence that raises every FencedResource bound to the Lease to the new epoch before the elector reports
//     leadership, so that a paused former holder's delayed write is refused even if the new holder never
//     writes, and declares it on the Lease, so that the webhook admits the holder's writes on its copy of
//     the Lease. The raise and its declaration are one elector.AcquireFence, which only this package builds.
//     Built from a rest.Config, its client has no client-side rate limit, so that one patch per resource
//     fits in the elector's PostAcquireTimeout.
//   - IsStale, IsNotHolder, IsLeaseMissing, IsTokenMissing: classify the errors of a refused write.
//
// Ordinary objects (ConfigMaps, Deployments, custom resources) are fenced the same way once a FencingPolicy
// declares them: NewClient wraps a controller-runtime client so that every write presents the current token,
// stamps the object's epoch record (annotation fencing.fencekit.io/epoch, which never goes down) and deletes
// through the deletion marker; it fails with ErrNoToken, without sending, once the token is gone.
// FenceObjectsOnAcquireForConfig is their fence-on-acquire hook.
//
// The admission decisions themselves are internal/operator/admission.Decide and ValidatePolicy, pure
// functions that fencekit's webhooks call (docs/design/admission.md).
package fencing
