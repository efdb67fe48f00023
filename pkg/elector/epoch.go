package elector

import (
	"errors"
	"fmt"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// errInvalidResourceVersion is returned (and the acquisition abandoned) when a resourceVersion the epoch
// would be seeded from is not a well-formed positive integer. Kubernetes >= 1.35 guarantees that it is; the
// elector fails closed rather than guess.
var errInvalidResourceVersion = errors.New("elector: resourceVersion is not a positive integer")

// errNoEpoch is returned (and the acquisition abandoned) when no epoch can be issued safely: the next one
// would exceed protocol.MaxEpoch, or would not be above an epoch already seen under the Lease's name (which only a
// hand-edited or unguarded Lease can cause). The error names the numbers; an admin has to repair the Lease.
var errNoEpoch = errors.New("elector: no epoch can be issued safely")

// parseEpoch reads l's epoch annotation with protocol.ParseEpoch. It may be above protocol.MaxEpoch (written by hand or
// before fencekit bounded epochs); trustedEpoch decides whether to use it.
func parseEpoch(l *coordinationv1.Lease) (int64, error) {
	if l == nil {
		return 0, errors.New("no lease")
	}
	s, ok := l.Annotations[protocol.EpochAnnotation]
	if !ok {
		return 0, fmt.Errorf("annotation %s is missing", protocol.EpochAnnotation)
	}
	v, err := protocol.ParseEpoch(s)
	if err != nil {
		return 0, fmt.Errorf("annotation %s=%w", protocol.EpochAnnotation, err)
	}
	return v, nil
}

// trustedEpoch is the epoch of l that the next acquisition may continue from (+1). fencekit's Lease policy
// guards only Leases labelled fencing.fencekit.io/fenced=true, so the annotation of an unlabelled Lease
// proves nothing: anyone who could write the Lease could have written any number there (an admin who
// recreates a live Lease unlabelled at an old epoch would otherwise have the next epoch reissued).
// An epoch above protocol.MaxEpoch is not continued either.
func trustedEpoch(l *coordinationv1.Lease) (int64, error) {
	if l.Labels[protocol.FencedLabel] != "true" {
		return 0, fmt.Errorf("the Lease lacks the label %s=true, so no policy guarded its annotation %s", protocol.FencedLabel, protocol.EpochAnnotation)
	}
	v, err := parseEpoch(l)
	if err != nil {
		return 0, err
	}
	if v > protocol.MaxEpoch {
		return 0, fmt.Errorf("annotation %s=%d is above the highest epoch %d", protocol.EpochAnnotation, v, protocol.MaxEpoch)
	}
	return v, nil
}

// parseResourceVersion reads a resourceVersion as an int64 >= 1, failing closed.
func parseResourceVersion(rv string) (int64, error) {
	v, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || v < 1 || strconv.FormatInt(v, 10) != rv {
		return 0, fmt.Errorf("%w: %q", errInvalidResourceVersion, rv)
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
// nil). floor is the highest epoch this elector has seen under this name.
//
//   - l carries a trusted epoch e (fenced label, valid annotation, at most protocol.MaxEpoch): e+1.
//   - l is nil: listRV (the current storage revision, above the resourceVersion of every write before it,
//     and every epoch is below the resourceVersion of the write that issued it).
//   - otherwise (no valid epoch, or an unlabelled Lease): l's own resourceVersion, for the same reason.
//
// It fails closed (errNoEpoch, with the numbers) rather than issue an epoch above protocol.MaxEpoch or one at or
// below an epoch already seen: floor, or the number in l's annotation, trusted or not. It never computes
// past protocol.MaxEpoch+1, so it cannot overflow.
func nextEpoch(lease types.NamespacedName, l *coordinationv1.Lease, listRV string, floor int64) (epochChoice, error) {
	var c epochChoice
	seen, seenWhere := floor, "the highest epoch this elector has seen under this name"
	switch l {
	case nil:
		v, err := parseResourceVersion(listRV)
		if err != nil {
			return c, fmt.Errorf("lease %s: seeding the epoch of a new Lease from the list resourceVersion: %w", lease, err)
		}
		c = epochChoice{epoch: v, seed: "lease is being created"}
	default:
		if v, err := parseEpoch(l); err == nil && v > seen {
			seen, seenWhere = v, "the epoch in its annotation "+protocol.EpochAnnotation
		}
		prev, perr := trustedEpoch(l)
		if perr == nil {
			if prev == protocol.MaxEpoch {
				return c, fmt.Errorf("%w: lease %s is at epoch %d; the next epoch %d would exceed the highest epoch %d", errNoEpoch, lease, prev, prev+1, protocol.MaxEpoch)
			}
			c = epochChoice{epoch: prev + 1}
			break
		}
		v, err := parseResourceVersion(l.ResourceVersion)
		if err != nil {
			return c, fmt.Errorf("lease %s: seeding the epoch from the Lease's resourceVersion (%w): %w", lease, perr, err)
		}
		c = epochChoice{epoch: v, seed: perr.Error()}
	}
	if c.seed != "" && c.epoch > protocol.MaxEpoch {
		return c, fmt.Errorf("%w: lease %s: the seed resourceVersion %d exceeds the highest epoch %d", errNoEpoch, lease, c.epoch, protocol.MaxEpoch)
	}
	if c.epoch <= seen {
		return c, fmt.Errorf("%w: lease %s: the next epoch %d is not above %d, %s; an admin must repair the Lease", errNoEpoch, lease, c.epoch, seen, seenWhere)
	}
	return c, nil
}
