package elector

// The Lease format: how fencekit records a fencing epoch on a coordination.k8s.io/v1 Lease. It is the
// contract between the elector (which writes it), the fencekit admission (which checks FencedResource
// writes against it and guards it with a ValidatingAdmissionPolicy) and the operator (which reports it).
const (
	// EpochAnnotation holds the Lease's current epoch: a decimal int64 >= 1, written by the same
	// compare-and-swap update (or create) that acquires the Lease, unchanged by renewals and releases.
	EpochAnnotation = "fencing.fencekit.io/epoch"

	// AcquirerAnnotation holds the authenticated user name (as the apiserver saw it, learned with a
	// SelfSubjectReview) of the client that wrote the acquisition at the current epoch. Admission binds
	// fenced writes to it: a write carrying the current epoch from another user is refused.
	AcquirerAnnotation = "fencing.fencekit.io/acquirer"

	// FencedLabel marks Leases managed by a fencekit elector ("true"). fencekit's ValidatingAdmissionPolicy
	// guards exactly these Leases: their epoch only rises, only in an acquisition, and only the acquirer
	// may renew or release.
	FencedLabel = "fencing.fencekit.io/fenced"
)
