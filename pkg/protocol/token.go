package protocol

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// Token is what one acquisition of a Lease hands to user code: the fencing epoch, and which Lease and
// holder it belongs to. Carry it on every guarded write; a resource that stores the highest epoch it has
// admitted and refuses lower ones (a FencedResource does) is then safe against a holder that was paused
// past its lease.
type Token struct {
	// Epoch strictly increases with every acquisition of the Lease, across restarts, expiries and even
	// the Lease being deleted and recreated.
	Epoch int64
	// Lease is the Lease's namespace and name.
	Lease types.NamespacedName
	// Holder is the holder identity that acquired the Lease at Epoch.
	Holder string
}

// String renders the token for logs: "default/orders-writer@7 (worker-a)".
func (t Token) String() string { return fmt.Sprintf("%s@%d (%s)", t.Lease, t.Epoch, t.Holder) }

// IsZero reports whether t is the zero Token (no leadership).
func (t Token) IsZero() bool { return t.Epoch == 0 }
