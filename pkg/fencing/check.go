package fencing

import (
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// BreakGlassGroup is the group whose members may write a FencedResource without being the Lease's acquirer
// (the epoch rules still apply: they present the Lease's current token like anyone) and may delete a FencedResource whose Lease has a live holder. Members of
// system:masters have the same rights. Grant it only for recovery.
const BreakGlassGroup = "fencekit:breakglass"

// The kube-system controllers that CheckDelete lets delete a FencedResource under a live Lease.
const (
	// GarbageCollectorUser deletes objects whose owners are gone. Owner references are fenced, so the owners
	// it acts on are the ones the holder set; it may also remove owner references (orphaning, or dropping
	// a dangling owner), never add or change one.
	GarbageCollectorUser = "system:serviceaccount:kube-system:generic-garbage-collector"
	// NamespaceControllerUser empties a namespace that is being deleted; it may delete a FencedResource
	// only while its namespace is terminating.
	NamespaceControllerUser = "system:serviceaccount:kube-system:namespace-controller"
)

// Requester is the authenticated user making a write, as the apiserver reports it to admission, and the
// field manager of the request, which presents the fencing token.
type Requester struct {
	Username string
	Groups   []string
	// FieldManager is the request's fieldManager (CreateOptions, UpdateOptions or PatchOptions): a fenced
	// write presents its token there, "fencing.fencekit.io/epoch=7" (elector.FieldManagerFor). It is never
	// read from the stored object, so a write cannot inherit it. Empty for a DELETE.
	FieldManager string
}

func (r Requester) breakGlass() bool {
	return slices.Contains(r.Groups, BreakGlassGroup) || slices.Contains(r.Groups, "system:masters")
}

// LeaseView is what fencing needs of a Lease, parsed from the fencekit Lease format.
type LeaseView struct {
	Name string
	// Epoch is the current epoch; EpochErr says why it could not be read (missing or malformed annotation).
	Epoch    int64
	EpochErr string
	Holder   string
	Acquirer string
	// RenewTime and Duration are the holder's last renewal and lease duration; Duration <= 0 when missing.
	RenewTime time.Time
	Duration  time.Duration
}

// ViewLease parses a Lease in the fencekit Lease format. It never fails: what it cannot read is reported in
// EpochErr (the epoch) or as a zero Duration (treated as expired).
func ViewLease(l *coordinationv1.Lease) LeaseView {
	v := LeaseView{Name: l.Name, Acquirer: l.Annotations[elector.AcquirerAnnotation]}
	raw, ok := l.Annotations[elector.EpochAnnotation]
	switch epoch, err := elector.ParseEpoch(raw); {
	case !ok:
		v.EpochErr = "it has no " + elector.EpochAnnotation + " annotation (no fencekit elector has acquired it)"
	case err != nil:
		v.EpochErr = "its " + elector.EpochAnnotation + " annotation " + strconv.Quote(raw) + " is not an epoch >= 1"
	case epoch > elector.MaxEpoch:
		v.EpochErr = "its " + elector.EpochAnnotation + " annotation " + strconv.Quote(raw) + " is above the highest epoch " +
			strconv.FormatInt(elector.MaxEpoch, 10) + " (no fencekit elector issues it)"
	default:
		v.Epoch = epoch
	}
	if l.Spec.HolderIdentity != nil {
		v.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		v.RenewTime = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		v.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return v
}

// isFenced reports whether lease carries the label that puts it under fencekit's Lease policy. The epochs
// and acquirer of a Lease without it are not guarded (anyone with RBAC on Leases may set them), so they
// prove nothing.
func isFenced(lease *coordinationv1.Lease) bool { return lease.Labels[elector.FencedLabel] == "true" }

// CheckWrite decides whether the write of fr (from old, nil on create) by req is fenced, given the bound
// Lease as read now (nil if it does not exist). It returns nil to admit the write. It is the whole decision
// of fencekit's admission webhook for creates and updates (patches included), as a pure function.
//
// A write that changes a fenced field (FencedChanges) is admitted only if the request itself presents the
// fencing token (req.FieldManager), because anything the request leaves out is inherited from the stored
// object: judged on the resulting object alone, a stale replica's plain merge patch of spec.data, a
// read-modify-write Update or a server-side apply of data only would carry the live holder's epoch and
// writer. The presented epoch must be the Lease's current epoch, the Lease fenced and live, the resulting
// spec.epoch the presented epoch, the writer annotation its holder, and the requester the user that
// acquired it (break-glass users skip only that last check: they present a token like anyone).
// A write that presents a token is checked even if it changes nothing, so that its success always means
// the token was current.
func CheckWrite(old, fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease, req Requester, now time.Time) *Error {
	changed := FencedChanges(old, fr)
	presents := strings.HasPrefix(req.FieldManager, elector.FieldManagerPrefix)
	if len(changed) == 0 && !presents {
		return nil
	}
	key := fr.Namespace + "/" + fr.Name
	leaseName := fr.Spec.LeaseName
	if !presents && old != nil && req.Username == GarbageCollectorUser &&
		slices.Equal(changed, []string{FieldOwnerReferences}) && onlyRemoves(old.OwnerReferences, fr.OwnerReferences) {
		return nil // the garbage collector orphans the resource or drops a dangling owner: it deletes nothing
	}
	if fr.Spec.Data != nil && len(fr.Spec.Data.Raw) > fencingv1alpha1.MaxDataBytes {
		return errorAt(FieldData, ReasonInvalid, key, leaseName, fr.Spec.Epoch, 0,
			"FencedResource %s: spec.data is %d bytes, over the bound of %d bytes", key, len(fr.Spec.Data.Raw), fencingv1alpha1.MaxDataBytes)
	}
	if !presents {
		manager := "no field manager"
		if req.FieldManager != "" {
			manager = "field manager " + strconv.Quote(req.FieldManager)
		}
		return errorAt(changed[0], ReasonTokenMissing, key, leaseName, 0, 0,
			"FencedResource %s: this write changes %s but presents no fencing token (%s): only the holder of lease %s may change them, "+
				"and it must send the write with fieldManager=%s<your epoch> (pkg/fencing's Writer does)",
			key, strings.Join(changed, ", "), manager, leaseName, elector.FieldManagerPrefix)
	}
	epoch, ok := elector.EpochFromFieldManager(req.FieldManager)
	if !ok {
		return errorAt("fieldManager", ReasonInvalid, key, leaseName, 0, 0,
			"FencedResource %s: field manager %q is not a valid fencing token: want %sN, N a decimal in [1, %d] without sign or leading zeros",
			key, req.FieldManager, elector.FieldManagerPrefix, elector.MaxEpoch)
	}
	if lease == nil {
		return errorf(ReasonLeaseMissing, key, leaseName, epoch, 0,
			"lease %s not found in namespace %s: FencedResource %s cannot be written at epoch %d until an elector holds that lease",
			leaseName, fr.Namespace, key, epoch)
	}
	if !isFenced(lease) {
		return errorf(ReasonLeaseMissing, key, leaseName, epoch, 0,
			"lease %s cannot fence FencedResource %s: it lacks the label %s=true, so its epochs are not guarded by fencekit's Lease policy and prove nothing",
			leaseName, key, elector.FencedLabel)
	}
	l := ViewLease(lease)
	if l.EpochErr != "" {
		return errorf(ReasonLeaseMissing, key, leaseName, epoch, 0,
			"lease %s cannot fence FencedResource %s: %s", leaseName, key, l.EpochErr)
	}
	holder := l.Holder
	if holder == "" {
		holder = "nobody"
	}
	switch {
	case epoch < l.Epoch:
		return errorf(ReasonStale, key, leaseName, epoch, l.Epoch,
			"FencedResource %s: stale epoch %d: lease %s is at epoch %d, held by %s", key, epoch, leaseName, l.Epoch, holder)
	case epoch > l.Epoch:
		return errorf(ReasonFutureEpoch, key, leaseName, epoch, l.Epoch,
			"FencedResource %s: epoch %d was never issued: lease %s is at epoch %d, held by %s", key, epoch, leaseName, l.Epoch, holder)
	case l.Holder == "":
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"lease %s at epoch %d has no holder (it was released): nobody may write FencedResource %s", leaseName, l.Epoch, key)
	case l.Duration <= 0 || l.RenewTime.IsZero():
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"FencedResource %s: lease %s at epoch %d has no valid renewTime or leaseDurationSeconds: its holder %s cannot be shown to be live",
			key, leaseName, l.Epoch, l.Holder)
	case now.After(l.RenewTime.Add(l.Duration)):
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"FencedResource %s: lease %s at epoch %d expired %s ago (held by %s, last renewed %s, duration %s)",
			key, leaseName, l.Epoch, now.Sub(l.RenewTime.Add(l.Duration)).Round(time.Millisecond), l.Holder, l.RenewTime.UTC().Format(time.RFC3339Nano), l.Duration)
	case fr.Spec.Epoch != epoch:
		return errorAt(FieldEpoch, ReasonInvalid, key, leaseName, epoch, l.Epoch,
			"FencedResource %s: the write presents epoch %d but its spec.epoch would be %d: a fenced write sets spec.epoch to the epoch it presents",
			key, epoch, fr.Spec.Epoch)
	}
	if writer := fr.Annotations[fencingv1alpha1.WriterAnnotation]; writer != l.Holder {
		return errorAt(FieldWriter, ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"FencedResource %s: write names holder %q (annotation %s) but lease %s at epoch %d is held by %s",
			key, writer, fencingv1alpha1.WriterAnnotation, leaseName, l.Epoch, l.Holder)
	}
	if marker, set := fr.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation]; set && slices.Contains(changed, FieldDeleteAtEpoch) &&
		marker != strconv.FormatInt(epoch, 10) {
		return errorAt(FieldDeleteAtEpoch, ReasonInvalid, key, leaseName, epoch, l.Epoch,
			"FencedResource %s: the deletion marker %s=%q must be the presented epoch %d",
			key, fencingv1alpha1.DeleteAtEpochAnnotation, marker, epoch)
	}
	if req.Username != l.Acquirer && !req.breakGlass() {
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"user %q is not the user that acquired lease %s at epoch %d (%q): only the holder %s may write FencedResource %s",
			req.Username, leaseName, l.Epoch, l.Acquirer, l.Holder, key)
	}
	return nil
}
