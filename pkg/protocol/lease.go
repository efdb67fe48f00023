package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// The Lease format: how fencekit records a fencing epoch on a coordination.k8s.io/v1 Lease. The elector
// writes it; fencekit's admission checks fenced writes against it and guards it with a
// ValidatingAdmissionPolicy; the operator and the CLIs report it.
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

	// FencesAnnotation declares what every acquisition of the Lease raises to its new epoch before the
	// token is handed out (fence-on-acquire): "fencedresources" (every FencedResource bound to the Lease),
	// "objects" (every object a FencingPolicy binds to it), or both, "fencedresources,objects". An elector
	// writes it in each acquisition from what its Config.PostAcquire declares (elector.AcquireFence.Fences). Once a fenced Lease declares a kind, the
	// Lease policy refuses every write that drops it, so every later acquisition fences that kind too; this
	// is what lets fencekit's admission decide a write at the Lease's current epoch from its watch-fed
	// copy of the Lease (docs/design/lease-reads.md).
	FencesAnnotation = "fencing.fencekit.io/fences"
)

// Fences is what an acquisition raises to its new epoch before handing out the token.
type Fences struct {
	// FencedResources: every FencedResource bound to the Lease (pkg/fencing's FenceOnAcquire).
	FencedResources bool
	// Objects: every object a FencingPolicy binds to the Lease (pkg/fencing's FenceObjectsOnAcquire).
	Objects bool
}

// The values of FencesAnnotation, one per kind, joined by "," in this order.
const (
	FencesFencedResources = "fencedresources"
	FencesObjects         = "objects"
)

// String is the value of FencesAnnotation that declares f, "" for none.
func (f Fences) String() string {
	switch {
	case f.FencedResources && f.Objects:
		return FencesFencedResources + "," + FencesObjects
	case f.FencedResources:
		return FencesFencedResources
	case f.Objects:
		return FencesObjects
	}
	return ""
}

// ParseFences reads a value of FencesAnnotation: exactly one of "", "fencedresources", "objects" and
// "fencedresources,objects" (the Lease policy admits no other).
func ParseFences(s string) (Fences, error) {
	for _, f := range []Fences{{}, {FencedResources: true}, {Objects: true}, {FencedResources: true, Objects: true}} {
		if f.String() == s {
			return f, nil
		}
	}
	return Fences{}, fmt.Errorf("%q is not a fence-on-acquire declaration: want %q, %q or %q",
		s, FencesFencedResources, FencesObjects, FencesFencedResources+","+FencesObjects)
}

// The request-scoped token. A check of the object a write results in cannot tell "this request carried
// epoch N" from "this request left the epoch out and inherited N from storage", so every fenced write
// presents its epoch in the request itself, as its field manager (CreateOptions, UpdateOptions and
// PatchOptions.fieldManager): "fencing.fencekit.io/epoch=7". Admission reads it from the request
// (request.options.fieldManager for a ValidatingAdmissionPolicy, AdmissionRequest.options for a webhook);
// it is never stored where a later write could inherit it as a token (the apiserver records it in
// managedFields, which proves nothing about later requests).
const (
	// FieldManagerPrefix starts the field manager of a request that presents a fencing token.
	FieldManagerPrefix = "fencing.fencekit.io/epoch="

	// MaxEpoch is the highest epoch fencekit issues or admits: 2^53-1, exact in every JSON consumer
	// (JavaScript, jq, float64 decoders), and far beyond what one-by-one acquisitions can reach.
	MaxEpoch int64 = 1<<53 - 1
)

// FieldManager is the field manager that presents t's epoch in a request: "fencing.fencekit.io/epoch=7".
func (t Token) FieldManager() string { return FieldManagerFor(t.Epoch) }

// FieldManagerFor is the field manager that presents epoch in a request.
func FieldManagerFor(epoch int64) string { return FieldManagerPrefix + strconv.FormatInt(epoch, 10) }

// ParseEpoch reads an epoch as the Lease format writes it, in the epoch annotation and in a field manager's
// token: a canonical decimal int64 (digits only, no sign, no leading zero) of at least 1. It is the
// format's one parser (the elector, the admission checks and the operator read epochs with it). It does not
// bound the number by MaxEpoch: an annotation above it was written by hand (or before fencekit bounded
// epochs) and is still a number the elector must not go below; whoever accepts only epochs fencekit issues
// also checks epoch <= MaxEpoch.
func ParseEpoch(s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s {
		return 0, fmt.Errorf("%q is not a decimal int64", s)
	}
	if v < 1 {
		return 0, fmt.Errorf("%q is below 1", s)
	}
	return v, nil
}

// EpochFromFieldManager reads the epoch a request's field manager presents. ok is false unless fm is
// exactly FieldManagerPrefix followed by an epoch (ParseEpoch) of at most MaxEpoch.
func EpochFromFieldManager(fm string) (epoch int64, ok bool) {
	s, found := strings.CutPrefix(fm, FieldManagerPrefix)
	if !found {
		return 0, false
	}
	v, err := ParseEpoch(s)
	if err != nil || v > MaxEpoch {
		return 0, false
	}
	return v, true
}
