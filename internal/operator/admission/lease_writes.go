package admission

import (
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// MaxFreeLeaseBytes bounds a fenced Lease after a write that neither acquires, renews nor releases it: its
// whole serialized form (JSON, as the apiserver hands it to admission), managedFields included. Such a
// write may leave the Lease larger than it was only while it stays within this bound. The Lease policy
// bounds what those writes add to the labels and annotations (252 KiB, 64 entries) and the finalizers
// (16), but it cannot see what a managedFields entry owns (CEL reads fieldsV1 as an object without
// fields), and the apiserver keeps the entries a write sends: one entry owning 50,000 annotations the
// Lease does not have made it 1.55 MB, and every renewal, acquisition and fenced write (each reads the
// Lease) pays to encode and decode it. 320 KiB holds the Lease policy's labels and annotations at their
// bounds with the managedFields entries that list them; every renewal, acquisition and release keeps
// its room below etcd's 1.5 MiB request limit.
const MaxFreeLeaseBytes = 320 * 1024

// decideLease decides a write to a fenced Lease (FencedLease). A write that acquires, renews or releases it
// (termWrite) is the Lease policy's to decide, which holds it to the acquirer's token; any other write
// may leave the Lease larger than it was only while it stays within MaxFreeLeaseBytes. Members of the
// break-glass groups are not checked, as the Lease policy does not check them.
func decideLease(r *Request) Verdict {
	if r.User.breakGlass() || r.New == nil || termWrite(r.Old, r.New) {
		return Verdict{}
	}
	if before, after := objectBytes(r.Old, r.OldBytes), objectBytes(r.New, r.NewBytes); after > before && after > MaxFreeLeaseBytes {
		return refuse(r.errAt(FieldObject, protocol.ReasonInvalid, 0, 0,
			"%s: this write, which neither acquires, renews nor releases it, grows the fenced Lease from %d to %d bytes (managedFields included), over the bound of %d bytes: every renewal and acquisition reads and writes the whole Lease",
			r.what(), before, after, MaxFreeLeaseBytes))
	}
	return Verdict{}
}

// termWrite reports whether the write of a fenced Lease from old (nil on a create) to updated acquires,
// renews or releases it, as the Lease policy's variable "guarded" says: it leaves an epoch, and either sets
// a new one (an acquisition; on a Lease that was not labelled fenced before, any epoch) or, under the same
// one, changes the spec or the acquirer. The Lease policy holds every such write to the token of the epoch
// it leaves and to the acquirer's identity. The object webhook's configuration sends the Lease webhook
// exactly the other writes (controllers.LeaseWebhook's match conditions).
func termWrite(old, updated *unstructured.Unstructured) bool {
	epoch := annotation(updated, protocol.EpochAnnotation)
	if epoch == "" {
		return false
	}
	if old == nil || old.GetLabels()[protocol.FencedLabel] != "true" {
		return true
	}
	if epoch != annotation(old, protocol.EpochAnnotation) {
		return true
	}
	return annotation(updated, protocol.AcquirerAnnotation) != annotation(old, protocol.AcquirerAnnotation) ||
		!reflect.DeepEqual(updated.Object["spec"], old.Object["spec"])
}
