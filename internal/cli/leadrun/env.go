package leadrun

import (
	"strconv"

	"github.com/fencekit/fencekit/pkg/elector"
)

// The environment a command started by Run receives, in addition to fencekit's own.
const (
	// EnvEpoch is the fencing epoch of the acquisition: a canonical decimal in [1, protocol.MaxEpoch].
	// Present it on every write the command makes.
	EnvEpoch = "FENCEKIT_EPOCH"
	// EnvLease is the Lease, "namespace/name".
	EnvLease = "FENCEKIT_LEASE"
	// EnvHolder is the holder identity that acquired the Lease.
	EnvHolder = "FENCEKIT_HOLDER"
	// EnvFieldManager is the field manager that presents the token to the Kubernetes apiserver
	// ("fencing.fencekit.io/epoch=7"): pass it as kubectl's --field-manager.
	EnvFieldManager = "FENCEKIT_FIELD_MANAGER"
)

// Environ is the token as environment variables ("NAME=value").
func Environ(t elector.Token) []string {
	return []string{
		EnvEpoch + "=" + strconv.FormatInt(t.Epoch, 10),
		EnvLease + "=" + t.Lease.String(),
		EnvHolder + "=" + t.Holder,
		EnvFieldManager + "=" + t.FieldManager(),
	}
}
