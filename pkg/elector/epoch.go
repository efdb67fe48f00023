package elector

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// ErrInvalidResourceVersion is returned (and the acquisition abandoned) when a resourceVersion the epoch
// would be seeded from is not a well-formed positive integer. Kubernetes >= 1.35 guarantees that it is; the
// elector fails closed rather than guess.
var ErrInvalidResourceVersion = errors.New("elector: resourceVersion is not a positive integer")

// parseEpoch reads the epoch annotation: a decimal int64 >= 1.
func parseEpoch(l *coordinationv1.Lease) (int64, error) {
	if l == nil {
		return 0, errors.New("no lease")
	}
	s, ok := l.Annotations[EpochAnnotation]
	if !ok {
		return 0, fmt.Errorf("annotation %s is missing", EpochAnnotation)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("annotation %s=%q is not a decimal int64", EpochAnnotation, s)
	}
	if v < 1 {
		return 0, fmt.Errorf("annotation %s=%q is below 1", EpochAnnotation, s)
	}
	return v, nil
}

// parseResourceVersion reads a resourceVersion as an int64 >= 1, failing closed.
func parseResourceVersion(rv string) (int64, error) {
	v, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || v < 1 || strconv.FormatInt(v, 10) != rv {
		return 0, fmt.Errorf("%w: %q", ErrInvalidResourceVersion, rv)
	}
	return v, nil
}

// epochChoice is the epoch an acquisition writes and why.
type epochChoice struct {
	epoch int64
	// seed is "" when the epoch is previous+1, else why it was seeded from a resourceVersion.
	seed string
}

// nextEpoch is the epoch rule. l is the Lease about to be acquired (nil: it is about to be created) and
// listRV the resourceVersion of a fresh consistent List of Leases in the namespace (used only when l is
// nil). floor is the highest epoch this elector has seen under this name; the result is always above it.
//
//   - l carries a valid epoch e: e+1.
//   - l is nil: listRV (the current storage revision, above the resourceVersion of every write before it,
//     and every epoch is below the resourceVersion of the write that issued it).
//   - l has no valid epoch: l's own resourceVersion, for the same reason.
func nextEpoch(l *coordinationv1.Lease, listRV string, floor int64) (epochChoice, error) {
	var c epochChoice
	switch {
	case l == nil:
		v, err := parseResourceVersion(listRV)
		if err != nil {
			return c, fmt.Errorf("seeding the epoch of a new Lease from the list resourceVersion: %w", err)
		}
		c = epochChoice{epoch: v, seed: "lease is being created"}
	default:
		prev, perr := parseEpoch(l)
		if perr == nil {
			if prev == math.MaxInt64 {
				return c, fmt.Errorf("epoch %d cannot be incremented", prev)
			}
			c = epochChoice{epoch: prev + 1}
			break
		}
		v, err := parseResourceVersion(l.ResourceVersion)
		if err != nil {
			return c, fmt.Errorf("seeding the epoch from the Lease's resourceVersion (%v): %w", perr, err)
		}
		c = epochChoice{epoch: v, seed: perr.Error()}
	}
	if c.epoch <= floor {
		c.epoch = floor + 1
	}
	return c, nil
}
