package protocol

// Reason says why a fenced write was refused. It travels from the admission webhook to the writer as the
// type of the first cause in the API error's details, so that clients can test for it.
type Reason string

const (
	// ReasonStale means the write carries an epoch below the Lease's current epoch (or below the epoch the
	// resource already admitted). The writer is a former holder: it must stop writing.
	ReasonStale Reason = "FencingStaleEpoch"
	// ReasonNotHolder means the write carries the current epoch but does not come from the Lease's current holder
	// (wrong holder identity, wrong authenticated user, or a Lease with no live holder).
	ReasonNotHolder Reason = "FencingNotHolder"
	// ReasonLeaseMissing means the bound Lease does not exist, carries no valid fencekit epoch (missing,
	// malformed, below 1 or above MaxEpoch), or is not a fenced Lease (label
	// fencing.fencekit.io/fenced=true): the epochs of such a Lease are not guarded and prove nothing.
	ReasonLeaseMissing Reason = "FencingLeaseMissing"
	// ReasonFutureEpoch means the write carries an epoch above the Lease's current epoch: no elector issued it.
	ReasonFutureEpoch Reason = "FencingFutureEpoch"
	// ReasonInvalid means the write is malformed: data over the size bound, a field manager that starts like a
	// token but is not one, a spec.epoch other than the presented epoch, a deletion marker other than it.
	ReasonInvalid Reason = "FencingInvalid"
	// ReasonTokenMissing means the write changes a fenced field without presenting a fencing token in the
	// request (fieldManager fencing.fencekit.io/epoch=N), or a delete under a live Lease comes without the
	// deletion marker written at the current epoch. A plain kubectl edit, patch or apply gets this.
	ReasonTokenMissing Reason = "FencingTokenMissing"
)
