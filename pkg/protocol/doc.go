// Package protocol is fencekit's wire contract: what the elector, the fenced clients, the admission
// webhooks, the Lease policy, the CLIs and the API agree on, parsed and formatted here only.
//
//   - The Lease format: the epoch, the acquirer and the fence-on-acquire declaration in a Lease's
//     annotations, and the label that marks a fenced Lease (EpochAnnotation, AcquirerAnnotation,
//     FencesAnnotation, FencedLabel, Fences).
//   - The token: what one acquisition hands out (Token), and its request-scoped form, the field manager
//     "fencing.fencekit.io/epoch=N" (FieldManagerFor, EpochFromFieldManager), with the one epoch parser
//     (ParseEpoch) and the highest epoch fencekit issues (MaxEpoch).
//   - The refusal reasons (Reason) a fenced write is refused with, from the apiserver to the writer.
//
// It imports nothing of fencekit, so every package may use it, api/v1alpha1 included.
package protocol
