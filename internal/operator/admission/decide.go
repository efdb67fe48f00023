package admission

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// The fields refusals name.
const (
	FieldEpoch         = "spec.epoch"
	FieldData          = "spec.data"
	FieldWriter        = "metadata.annotations[" + fencingv1alpha1.WriterAnnotation + "]"
	FieldDeleteAtEpoch = "metadata.annotations[" + fencingv1alpha1.DeleteAtEpochAnnotation + "]"
	FieldObjectEpoch   = "metadata.annotations[" + fencingv1alpha1.ObjectEpochAnnotation + "]"
	FieldFieldManager  = "fieldManager"
	FieldManagedFields = "metadata.managedFields"
	FieldFinalizers    = "metadata.finalizers"
	FieldObject        = "metadata"
	FieldPropagation   = "propagationPolicy"
	FieldGracePeriod   = "gracePeriodSeconds"
	FieldPrecondition  = "preconditions.resourceVersion"
)

// Need says what a caller must read before the rule can decide.
type Need int

const (
	// Decided: the verdict is final.
	Decided Need = iota
	// NeedLease: decide again with a view of the Lease; the webhook's copy may admit (and only admit), so
	// try it first if there is one.
	NeedLease
	// NeedQuorum: decide again with a quorum read of the Lease.
	NeedQuorum
)

// Verdict is the rule's answer. If Need is Decided, the write is admitted when Err is nil.
type Verdict struct {
	Need Need
	Err  *fencing.Error
	// Moment marks a refusal that only holds the write back for a moment (Request.Racing): it says nothing
	// about the writer, and the webhook records no Event for it.
	Moment bool
}

// Admitted reports whether the verdict admits the write.
func (v Verdict) Admitted() bool { return v.Need == Decided && v.Err == nil }

var admit = Verdict{}

func refuse(err *fencing.Error) Verdict { return Verdict{Err: err} }

// Decide decides r, given the bound Lease as read (nil: not read yet; Missing: it does not exist) and the
// time now. A write that presents no token is decided without the Lease, unless the object carries a
// deletion marker or a hold (held); it is refused while a write that presents a token is being decided on
// the same stored object (Racing: the apiserver decides a patch again after every conflict, and the
// token's write, which may read the Lease, is slower to decide than one without the token, which could
// otherwise win every round). A DELETE under a live Lease and every write that presents a token need the
// Lease. A view from the webhook's copy (Source Copy) may only admit: where it could refuse, or where the
// copy cannot be trusted to decide, the verdict asks for a quorum read.
// A write of a fenced Lease (FencedLease) is decided on its size alone, without l (decideLease).
func Decide(r *Request, l *Lease, now time.Time) Verdict {
	if !r.facts.completed {
		return refuse(r.errAt("", protocol.ReasonInvalid, 0, 0,
			"%s: the request was decided before it was read (admission.Request.Complete): fencekit refuses what it has not read", r.what()))
	}
	if r.Class == FencedLease {
		return decideLease(r)
	}
	if r.Operation == Delete {
		return decideDelete(r, l, now)
	}
	if !r.presents() {
		if r.Racing > 0 && r.Operation == Update && r.Old != nil && !r.User.Operator {
			return Verdict{Moment: true, Err: r.errAt(FieldFieldManager, protocol.ReasonTokenMissing, 0, r.Racing,
				"%s: a write presenting the fencing token of epoch %d (lease %s) is being decided on the same stored object (resourceVersion %s), and this write presents none (%s): admitted first, it would change the resourceVersion under the token's write and send that write round again, as often as anyone writes; send it again in a moment",
				r.what(), r.Racing, r.LeaseName, r.Old.GetResourceVersion(), managerOf(r))}
		}
		if holds := r.held(now); len(holds) > 0 {
			if l == nil || l.Source == Copy {
				return Verdict{Need: NeedQuorum}
			}
			for _, h := range holds {
				if !l.Live(now) || l.Epoch != h.epoch {
					continue
				}
				doing := "held for the holder's next compare-and-swap write"
				if h.key == fencingv1alpha1.DeleteAtEpochAnnotation {
					doing = "being deleted (its DELETE's precondition is the marker write's resourceVersion)"
				}
				return refuse(r.errAt("metadata.annotations["+h.key+"]", protocol.ReasonTokenMissing, 0, l.Epoch,
					"%s is %s by the holder of lease %s: %s=%d is the Lease's current epoch, and a write without the token would change its resourceVersion under the holder; send it again once the holder has written",
					r.what(), doing, r.LeaseName, h.key, h.epoch))
			}
		}
		return decideFree(r)
	}
	switch {
	case l == nil && copyEligible(r):
		return Verdict{Need: NeedLease}
	case l == nil:
		return Verdict{Need: NeedQuorum}
	case l.Source == Copy && !copyMayAdmit(r, l):
		return Verdict{Need: NeedQuorum}
	}
	err := decideFenced(r, l, now)
	if err != nil && l.Source == Copy {
		return Verdict{Need: NeedQuorum}
	}
	return Verdict{Err: err}
}

// HoldsBackFreeWrites reports whether r, a write presenting a token, holds back the writes without it that
// read the same stored object while it is decided (Request.Racing): only a write that may commit, an update
// by the Lease's acquirer (or break glass) at the epoch the view l shows live, never a dry run. Anyone else
// presenting a token (a stale replica, another user who copied the token from managedFields) is refused, and
// must not hold back the cluster's controllers or anyone's free writes while that is decided.
func HoldsBackFreeWrites(r *Request, l *Lease, now time.Time) bool {
	presented, ok := r.facts.token, r.facts.tokenOK
	return ok && !r.DryRun && r.Operation == Update && l.Live(now) && l.Epoch == presented &&
		(r.User.Name == l.Acquirer || r.User.breakGlass())
}

// held returns the stored object's deletion marker and hold (each if it holds a valid epoch). While
// either is the Lease's current epoch, the holder is in the middle of a write that carries the
// resourceVersion it read: its DELETE after the marker write (decideDelete), or the compare-and-swap
// write it retries after losing one (the hold). Either may hold, whatever the other says: a marker or a
// hold at an earlier epoch (an earlier holder's) or at a later one (written by anyone before a policy
// covered the object) does not hide the current holder's. A write without the token in between would
// change the resourceVersion and make that write fail with a conflict, as often as anyone cares to write
// (a label, a finalizer: free); so such writes wait until the holder has written, and the holder's next
// write removes a marker or hold it no longer needs. On an object being deleted only the hold holds: no
// DELETE of the holder's is pending, but its compare-and-swap removal of its finalizer may be, and free
// writes (labels) may go on there. The cluster's own controllers (kubelets, kube-controller-manager, the
// scheduler, the apiserver's own writes such as a ResourceQuota's usage) are held too, but only for
// MaxClusterControllerHold after the holder armed it (the time the apiserver recorded on the entry of
// that epoch's token that owns it, armedAt): their writes cannot be refused for long, since a holder that armed a
// hold and never wrote again would lock them out for the rest of its term, and a status storm of theirs
// (a compromised node, an editor whose creates make the apiserver count a quota) must not starve the
// holder's retry, which follows the hold within one round trip.
func (r *Request) held(now time.Time) []mark {
	if r.Operation != Update || r.Old == nil {
		return nil
	}
	var holds []mark
	for _, m := range r.facts.marks {
		if m.key == fencingv1alpha1.DeleteAtEpochAnnotation && r.Old.GetDeletionTimestamp() != nil {
			continue // the holder's DELETE is done; its compare-and-swap writes (a finalizer's removal) may not be
		}
		if r.User.clusterController() && (m.armed.IsZero() || now.Sub(m.armed) > MaxClusterControllerHold) {
			continue
		}
		holds = append(holds, m)
	}
	return holds
}

// MaxClusterControllerHold is how long after the holder armed its deletion marker or hold the cluster's
// own controllers wait with their writes (held): the elector's default RenewDeadline. The holder's DELETE,
// or its retried compare-and-swap write, follows within one round trip, which an apiserver under load
// stretches to seconds (a hold armed again with the same value changes nothing, so its time is the first
// arming's); managedFields record the time in whole seconds.
const MaxClusterControllerHold = 10 * time.Second

// copyEligible reports whether the webhook's copy of the Lease may decide r at all: an update of the object
// itself (no subresource: a Scale or a status carries no record to hold against) that presents the epoch
// the object already holds (it raises nothing), to an object a holder wrote content to (pkg/fencing's
// HolderWrote: fence-on-acquire raises every such object, the others only within its budget), a
// FencedResource holding data (one a holder wrote:
// fence-on-acquire raises every such resource, but a declaration only within its budget, even once an
// earlier raise brought it above epoch 0), to an object a policy covers both before and after the
// write (a write that changes coverage, a label in or out of a selector, is decided on a quorum read:
// fence-on-acquire raises only the objects the selectors matched when it listed them), whose covering
// policy has its coverage recorded (copyMayAdmit then requires the copy's epoch above it: a policy created
// or changed while the Lease was held declares objects that acquisition's fence never listed).
//
// Why the copy is then safe: if the Lease has meanwhile been acquired at e+1 (the copy lags), that
// acquisition declared the object's kind (copyMayAdmit: the Lease policy never lets a declaration be
// dropped) and came after the policy's current generation (its coverage epoch is below e), so it listed
// the object and the new holder committed a write to it (its raise) before it was handed its token;
// the apiserver's compare-and-swap orders that write against this one, and admission runs again on the
// loser: raise first, and the stored epoch is then e+1, not eligible; this write first, and it committed
// before the new token existed.
func copyEligible(r *Request) bool {
	if r.Operation != Update || r.Subresource != "" || r.Old == nil || r.New == nil {
		return false
	}
	presented, ok := r.facts.token, r.facts.tokenOK
	if !ok {
		return false
	}
	if r.Class == Object {
		return r.facts.recordOK && r.facts.record == presented && r.CoveredBefore && r.CoveredAfter && r.CoverageRecorded && r.facts.oldWritten
	}
	stored, _, _ := unstructured.NestedInt64(r.Old.Object, "spec", "epoch")
	data, _, _ := unstructured.NestedFieldNoCopy(r.Old.Object, "spec", "data")
	return stored == presented && data != nil
}

// copyMayAdmit reports whether the copy l may admit r: r is eligible, and the copy shows the Lease fenced,
// at the presented epoch, declaring fence-on-acquire for r's class.
func copyMayAdmit(r *Request, l *Lease) bool {
	presented := r.facts.token
	return copyEligible(r) && !l.Missing && l.Fenced && l.EpochErr == "" && l.Epoch == presented && l.declares(r.Class) &&
		(r.Class != Object || l.Epoch > r.CoverageEpoch)
}

// decideFree decides a write that presents no token: it is admitted only if every field it changes is
// on the allowlist, ownership moves only within those fields, and what it adds stays within the bounds.
func decideFree(r *Request) Verdict {
	var old, updated map[string]any
	if r.Old != nil {
		old = r.Old.Object
	}
	if r.New != nil {
		updated = r.New.Object
	}
	if r.Class == FencedResource {
		old, updated = withEpoch(old), withEpoch(updated)
	}
	free := freeFor(r)
	var fenced []Path
	for _, p := range changedPaths(old, updated) {
		if free(p) {
			continue
		}
		if r.Class == FencedResource && p.under("spec", "data") {
			p = p[:2] // spec.data as a whole, as clients test it, whatever key changed
			if len(fenced) > 0 && slices.Equal(fenced[len(fenced)-1], p) {
				continue
			}
		}
		fenced = append(fenced, p)
	}
	if len(fenced) > 0 {
		if named := withoutIdentity(fenced); len(named) > 0 {
			fenced = named // a create's name and namespace say nothing the object's name does not
		}
		return refuse(r.tokenMissing(fenced[0].String(), "this write changes "+listPaths(fenced, 8)))
	}
	changes, err := ownershipChanges(r.Old, r.New, free, r.User.clusterController() || r.operatorStatus())
	if err != nil {
		return refuse(r.errAt(FieldManagedFields, protocol.ReasonInvalid, 0, 0, "%s: %v", r.what(), err))
	}
	if len(changes) > 0 {
		c := changes[0]
		desc := c.why
		if c.path != nil {
			desc += " " + c.path.String()
		}
		return refuse(r.tokenMissing(FieldManagedFields, fmt.Sprintf("this write changes metadata.managedFields: it %s in the entry of %s", desc, c.entry)))
	}
	if merged := mergedIntoWritten(r); len(merged) > 0 {
		return refuse(r.tokenMissing(FieldManagedFields, fmt.Sprintf(
			"this write puts the content that the managedFields entries of %s own into the apiserver's ancient-changes entry (the apiserver merges the oldest Update entries there past ten; a write may also rename an entry), and fencekit counts that entry as a holder's: the object, which no holder wrote, would count as written (sent with the field manager of an existing entry, a write adds no entry and sets off no merge)",
			strings.Join(merged, ", "))))
	}
	if n, ok := fillsTheTokensRoom(r); ok {
		return refuse(r.tokenMissing(FieldManagedFields, fmt.Sprintf(
			"this write adds a managedFields entry and brings the object, which no holder wrote, to %d Update entries: the holder's next write adds its epoch's entry, past %d the apiserver merges the oldest into ancient-changes, and the content they own written before coverage would count as the holder's (sent with the field manager of an existing entry, a write adds none)",
			n, fencing.MaxUpdateEntries)))
	}
	if before, after := objectBytes(r.Old, r.OldBytes), objectBytes(r.New, r.NewBytes); after > before && after > MaxFreeObjectBytes {
		return refuse(r.errAt(FieldObject, protocol.ReasonInvalid, 0, 0,
			"%s: this write without a fencing token grows the object from %d to %d bytes (managedFields included), over the bound of %d bytes for writes without the token: the holder's next write must keep its room below the apiserver's limit",
			r.what(), before, after, MaxFreeObjectBytes))
	}
	if before, after, most := freePart(r.Old), freePart(r.New), bounds(r); after.bytes > before.bytes && after.bytes > most.bytes {
		return refuse(r.errAt(FieldObject, protocol.ReasonInvalid, 0, 0,
			"%s: this write without a fencing token grows its labels, annotations, finalizers, owner references, status and managedFields other than the holder's from %d to %d bytes, over the bound of %d bytes for writes without the token: every acquisition rewrites the holder's objects, and must not slow down with what others add",
			r.what(), before.bytes, after.bytes, most.bytes))
	} else if after.entries > before.entries && after.entries > most.entries {
		return refuse(r.errAt(FieldObject, protocol.ReasonInvalid, 0, 0,
			"%s: this write without a fencing token grows its labels, annotations, finalizers, owner references, status list elements and managedFields entries other than the holder's from %d to %d, over the bound of %d for writes without the token: every acquisition rewrites the holder's objects, and must not slow down with what others add",
			r.what(), before.entries, after.entries, most.entries))
	}
	if before, after := annotationBytes(r.Old), annotationBytes(r.New); after > before && after > MaxFreeAnnotationBytes {
		return refuse(r.errAt("metadata.annotations", protocol.ReasonInvalid, 0, 0,
			"%s: this write without a fencing token grows its annotations from %d to %d bytes, over the bound of %d bytes for writes without the token: the apiserver allows %d, and the holder's next write adds fencekit's own",
			r.what(), before, after, MaxFreeAnnotationBytes, 256*1024))
	}
	return admit
}

// mergedIntoWritten returns the field managers whose entries a write of an object that no holder wrote
// (fencing.HolderWrote) makes the apiserver merge into ancient-changes, if that makes the object count as
// written: past ten Update entries the apiserver merges the oldest into that bucket, and content owned
// there counts as a holder's, because a holder's own entries are merged there too. Only a write with the
// token may make an object count as written.
func mergedIntoWritten(r *Request) []string {
	if r.Class != Object || r.Old == nil || r.New == nil || r.facts.oldWritten || !r.facts.newWritten {
		return nil
	}
	kept := sets.New[string]()
	for _, e := range r.New.GetManagedFields() {
		kept.Insert(e.Manager)
	}
	var merged []string
	for _, e := range r.Old.GetManagedFields() {
		if !kept.Has(e.Manager) {
			merged = append(merged, strconv.Quote(e.Manager))
		}
	}
	if len(merged) == 0 {
		merged = []string{"other managers"}
	}
	return merged
}

// fillsTheTokensRoom reports whether a write without the token leaves an object no holder wrote with no
// room for the token's entry: it adds an Update entry, and the count n it leaves, with the entry of the
// holder's next write (a raise's included) added, passes the apiserver's cap, so that write would set off
// a merge of the oldest entries into ancient-changes, which HolderWrote counts as a holder's; content among
// them (written before a policy covered the object) would make the object count as written, and every
// acquisition would raise it in full (I3). An entry of a token that owns fencekit's record keys and nothing
// else is emptied by the next raise, which takes them, and dropped: that raise adds nothing. One that also
// owns the annotations map (the first raise created it) stays. The cluster's controllers write with field
// managers of their own, one each, and are not held to it (docs/design/residuals.md).
func fillsTheTokensRoom(r *Request) (n int, fills bool) {
	if r.Class != Object || r.Old == nil || r.New == nil || r.User.clusterController() || r.facts.newWritten {
		return 0, false
	}
	before, _ := updateEntries(r.Old)
	n, token := updateEntries(r.New)
	next := n
	if !token {
		next++
	}
	if n <= before || next <= fencing.MaxUpdateEntries {
		return n, false
	}
	return n, r.facts.mergeCountsWritten
}

// updateEntries counts u's Update entries, and reports whether one of them is a token's that owns only
// fencekit's record keys (recordOnly).
func updateEntries(u *unstructured.Unstructured) (n int, token bool) {
	for _, e := range managedEntries(u) {
		if e["operation"] == "Update" {
			n++
			fields, _ := e["fieldsV1"].(map[string]any)
			token = token || strings.HasPrefix(fmt.Sprint(e["manager"]), protocol.FieldManagerPrefix) && recordOnly(fields)
		}
	}
	return n, token
}

// recordOnly reports whether fieldsV1 set s owns an object's record annotations (its epoch record,
// deletion marker, hold) and nothing else, not even the annotations map itself.
func recordOnly(s map[string]any) bool {
	meta, ok := s["f:metadata"].(map[string]any)
	if len(s) != 1 || !ok || len(meta) != 1 {
		return false
	}
	annotations, ok := meta["f:annotations"].(map[string]any)
	if !ok || len(annotations) == 0 {
		return false
	}
	for k := range annotations {
		switch strings.TrimPrefix(k, "f:") {
		case fencingv1alpha1.ObjectEpochAnnotation, fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation:
		default:
			return false
		}
	}
	return true
}

// managedEntries returns u's managedFields entries as u holds them (fieldsV1 decoded), without converting
// them.
func managedEntries(u *unstructured.Unstructured) []map[string]any {
	raw, _, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
	out := make([]map[string]any, 0, len(raw))
	for _, e := range raw {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// withoutIdentity is ps without metadata.name, generateName and namespace.
func withoutIdentity(ps []Path) []Path {
	var out []Path
	for _, p := range ps {
		if len(p) == 2 && p.under("metadata") && (p[1] == "name" || p[1] == "generateName" || p[1] == "namespace") {
			continue
		}
		out = append(out, p)
	}
	return out
}

// withEpoch returns o with spec.epoch set to 0 where it is absent, as the API type reads it.
func withEpoch(o map[string]any) map[string]any {
	if o == nil {
		return map[string]any{"spec": map[string]any{"epoch": int64(0)}}
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(o, "spec", "epoch"); found {
		return o
	}
	c := make(map[string]any, len(o))
	for k, v := range o {
		c[k] = v
	}
	spec, _ := o["spec"].(map[string]any)
	s := make(map[string]any, len(spec)+1)
	for k, v := range spec {
		s[k] = v
	}
	s["epoch"] = int64(0)
	c["spec"] = s
	return c
}

func (r *Request) tokenMissing(field, changes string) *fencing.Error {
	manager := managerOf(r)
	if r.Class == FencedResource {
		return r.errAt(field, protocol.ReasonTokenMissing, 0, 0,
			"%s: %s but presents no fencing token (%s): only the holder of lease %s may change them, and it must send the write with fieldManager=%s<your epoch> (pkg/fencing's Writer does)",
			r.what(), changes, manager, r.LeaseName, protocol.FieldManagerPrefix)
	}
	return r.errAt(field, protocol.ReasonTokenMissing, 0, 0,
		"%s: %s but presents no fencing token (%s): FencingPolicy %s lets only the holder of lease %s write it, with fieldManager=%s<its epoch> (pkg/fencing's NewClient does)",
		r.what(), changes, manager, r.Policy, r.LeaseName, protocol.FieldManagerPrefix)
}

// decideFenced decides a write that presents a token, on the Lease view l.
func decideFenced(r *Request, l *Lease, now time.Time) *fencing.Error {
	what := r.what()
	epoch, ok := r.facts.token, r.facts.tokenOK
	if r.Class == FencedResource && r.New != nil {
		if data, found, _ := unstructured.NestedFieldNoCopy(r.New.Object, "spec", "data"); found && data != nil {
			if n := jsonSize(data); n > fencingv1alpha1.MaxDataBytes {
				return r.errAt(FieldData, protocol.ReasonInvalid, epoch, 0,
					"%s: spec.data is %d bytes, over the bound of %d bytes", what, n, fencingv1alpha1.MaxDataBytes)
			}
		}
	}
	if !ok {
		return r.errAt(FieldFieldManager, protocol.ReasonInvalid, 0, 0,
			"%s: field manager %q is not a valid fencing token: want %sN, N a decimal in [1, %d] without sign or leading zeros",
			what, r.FieldManager, protocol.FieldManagerPrefix, protocol.MaxEpoch)
	}
	if err := r.liveAt(l, epoch, now); err != nil {
		return err
	}
	if r.Class == FencedResource {
		if err := r.fencedResourceFields(l, epoch); err != nil {
			return err
		}
	}
	if r.User.Name != l.Acquirer && !r.User.breakGlass() {
		msg := fmt.Sprintf("user %q is not the user that acquired lease %s at epoch %d (%q): only the holder %s may write %s",
			r.User.Name, r.LeaseName, l.Epoch, l.Acquirer, l.Holder, r.it())
		if r.Class == Object {
			msg = what + ": " + msg
		}
		return r.errAt("", protocol.ReasonNotHolder, epoch, l.Epoch, "%s", msg)
	}
	if err := r.deleting(l, epoch); err != nil {
		return err
	}
	if r.Class == Object {
		if err := r.record(l, epoch); err != nil {
			return err
		}
	}
	return r.marker(l, epoch)
}

// fencekitKeys are the annotations fencekit writes with the token: the writer, the epoch record, the
// deletion marker and the hold. They record the write, not the object's content.
var fencekitKeys = []string{fencingv1alpha1.WriterAnnotation, fencingv1alpha1.ObjectEpochAnnotation,
	fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation}

// deleting refuses a write with the token that would change the content of an object being deleted
// (deletionTimestamp set), or of one in a namespace being deleted: the object goes once its finalizers are
// removed, and anyone may remove a finalizer that is not orphan or foregroundDeletion (free); the
// namespace controller deletes every object of a terminating namespace. Such a write would be
// acknowledged and then lost. The holder may still remove finalizers, raise the epoch and write
// fencekit's own annotations (a fence-on-acquire raise, a second delete's marker), and write status: none
// of that is content the holder expects to keep.
func (r *Request) deleting(l *Lease, epoch int64) *fencing.Error {
	// A subresource of another kind (a Scale) carries none of the object's metadata, and the operator may
	// not read every declared object: pkg/fencing's NewClient checks those writes itself before it sends
	// them (docs/design/residuals.md). One that carries the object (pods/ephemeralcontainers,
	// pods/resize) is checked here.
	if r.Operation == Delete || r.Old == nil || r.New == nil || r.Old.GetDeletionTimestamp() == nil && !r.NamespaceTerminating ||
		(r.foreign() && r.Old.GetKind() != r.Kind) {
		return nil
	}
	old, updated := r.Old.Object, r.New.Object
	if r.Class == FencedResource {
		old, updated = withEpoch(old), withEpoch(updated)
	}
	free := freeFor(r)
	var content []Path
	for _, p := range changedPaths(old, updated) {
		switch {
		case free(p), p.under("metadata", "finalizers"), p.under("status") && r.Subresource == "status",
			r.Class == FencedResource && p.under("spec", "epoch"),
			len(p) == 3 && p.under("metadata", "annotations") && slices.Contains(fencekitKeys, p[2]):
			continue
		}
		content = append(content, p)
	}
	if len(content) == 0 {
		return nil
	}
	if r.Old.GetDeletionTimestamp() == nil {
		return r.errAt(content[0].String(), protocol.ReasonInvalid, epoch, l.Epoch,
			"%s: its namespace %s is being deleted, and the namespace controller deletes every object in it: this write changes %s, which would go with it; write it in another namespace",
			r.what(), r.Namespace, listPaths(content, 8))
	}
	return r.errAt(content[0].String(), protocol.ReasonInvalid, epoch, l.Epoch,
		"%s is being deleted (deletionTimestamp %s, finalizers %q): this write changes %s, which would go with it once its finalizers are removed; wait until it is gone, then create it again",
		r.what(), r.Old.GetDeletionTimestamp().UTC().Format(time.RFC3339), r.Old.GetFinalizers(), listPaths(content, 8))
}

// liveAt checks that l is a fenced Lease, live at exactly epoch.
func (r *Request) liveAt(l *Lease, epoch int64, now time.Time) *fencing.Error {
	what := r.what()
	switch {
	case l.Missing:
		return r.errAt("", protocol.ReasonLeaseMissing, epoch, 0,
			"%s: lease %s not found in namespace %s: %s cannot be written at epoch %d until an elector holds that lease",
			what, r.LeaseName, r.Namespace, r.it(), epoch)
	case !l.Fenced:
		return r.errAt("", protocol.ReasonLeaseMissing, epoch, 0,
			"%s: lease %s cannot fence %s: it lacks the label %s=true, so its epochs are not guarded by fencekit's Lease policy and prove nothing",
			what, r.LeaseName, r.it(), protocol.FencedLabel)
	case l.EpochErr != "":
		return r.errAt("", protocol.ReasonLeaseMissing, epoch, 0, "%s: lease %s cannot fence %s: %s", what, r.LeaseName, r.it(), l.EpochErr)
	}
	holder := l.Holder
	if holder == "" {
		holder = "nobody"
	}
	switch {
	case epoch < l.Epoch:
		return r.errAt("", protocol.ReasonStale, epoch, l.Epoch,
			"%s: stale epoch %d: lease %s is at epoch %d, held by %s", what, epoch, r.LeaseName, l.Epoch, holder)
	case epoch > l.Epoch:
		return r.errAt("", protocol.ReasonFutureEpoch, epoch, l.Epoch,
			"%s: epoch %d was never issued: lease %s is at epoch %d, held by %s", what, epoch, r.LeaseName, l.Epoch, holder)
	case l.Holder == "":
		return r.errAt("", protocol.ReasonNotHolder, epoch, l.Epoch,
			"%s: lease %s at epoch %d has no holder (it was released): nobody may write %s", what, r.LeaseName, l.Epoch, r.it())
	case l.Duration <= 0 || l.RenewTime.IsZero():
		return r.errAt("", protocol.ReasonNotHolder, epoch, l.Epoch,
			"%s: lease %s at epoch %d has no valid renewTime or leaseDurationSeconds: its holder %s cannot be shown to be live",
			what, r.LeaseName, l.Epoch, l.Holder)
	case now.After(l.Expiry()):
		return r.errAt("", protocol.ReasonNotHolder, epoch, l.Epoch,
			"%s: lease %s at epoch %d expired %s ago (held by %s, last renewed %s, duration %s)",
			what, r.LeaseName, l.Epoch, now.Sub(l.Expiry()).Round(time.Millisecond), l.Holder,
			l.RenewTime.UTC().Format(time.RFC3339Nano), l.Duration)
	}
	return nil
}

// onlyClearsMarks reports whether r changes nothing of the object but remove its deletion marker or hold
// (and the managedFields and the metadata the apiserver keeps: a Deployment's generation rises with its
// annotations): what fence-on-acquire writes to an object
// it leaves unraised, which may carry a marker or hold written before a policy covered it. Such a write
// raises nothing; it only takes away what would let a DELETE or a hold through at a later epoch.
func (r *Request) onlyClearsMarks() bool {
	if r.Old == nil || r.New == nil {
		return false
	}
	changed := changedPaths(r.Old.Object, r.New.Object)
	if len(changed) == 0 {
		return false
	}
	for _, p := range changed {
		switch {
		case p.under("metadata", "managedFields"), apiserverKept(p):
		case len(p) == 2 && p.under("metadata", "annotations"): // the whole map: it held the marks alone
			if len(r.New.GetAnnotations()) > 0 {
				return false
			}
			for k := range r.Old.GetAnnotations() {
				if k != fencingv1alpha1.DeleteAtEpochAnnotation && k != fencingv1alpha1.HoldAtEpochAnnotation {
					return false
				}
			}
		case len(p) == 3 && p.under("metadata", "annotations") &&
			(p[2] == fencingv1alpha1.DeleteAtEpochAnnotation || p[2] == fencingv1alpha1.HoldAtEpochAnnotation):
			if _, still := annotationOK(r.New, p[2]); still {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// fencedResourceFields holds a FencedResource's write to its epoch and writer: spec.epoch is the presented
// epoch (or spec.raisedEpoch, where fence-on-acquire raises a declaration), the writer annotation the holder.
func (r *Request) fencedResourceFields(l *Lease, epoch int64) *fencing.Error {
	got, _, _ := unstructured.NestedInt64(r.New.Object, "spec", "epoch")
	if got != epoch && !r.raisesDeclaration(epoch) {
		return r.errAt(FieldEpoch, protocol.ReasonInvalid, epoch, l.Epoch,
			"%s: the write presents epoch %d but its spec.epoch would be %d: a fenced write sets spec.epoch to the epoch it presents",
			r.what(), epoch, got)
	}
	if writer := annotation(r.New, fencingv1alpha1.WriterAnnotation); writer != l.Holder {
		return r.errAt(FieldWriter, protocol.ReasonNotHolder, epoch, l.Epoch,
			"%s: write names holder %q (annotation %s) but lease %s at epoch %d is held by %s",
			r.what(), writer, fencingv1alpha1.WriterAnnotation, r.LeaseName, l.Epoch, l.Holder)
	}
	return nil
}

// raisesDeclaration reports whether r raises a declaration to epoch: it sets spec.raisedEpoch to it and
// leaves spec.epoch at 0 and no data, as fence-on-acquire does.
func (r *Request) raisesDeclaration(epoch int64) bool {
	if r.Old == nil {
		return false
	}
	was, _, _ := unstructured.NestedInt64(r.Old.Object, "spec", "epoch")
	is, _, _ := unstructured.NestedInt64(r.New.Object, "spec", "epoch")
	raised, _, _ := unstructured.NestedInt64(r.New.Object, "spec", "raisedEpoch")
	data, _, _ := unstructured.NestedFieldNoCopy(r.New.Object, "spec", "data")
	return was == 0 && is == 0 && data == nil && raised == epoch
}

// record holds a covered object's epoch record: a write of the object itself sets it to the presented
// epoch; a status write may leave it as stored. A stored record above the presented epoch (which liveAt
// has shown to be the Lease's current one, on a quorum read: the copy never decides such a write) was not
// issued by this Lease: a record the Lease issued at e+1 was written after the acquisition of e+1, so a
// quorum read made after the stored object was read would show it. Such a record was written before any
// policy covered the object, by anyone; the holder's write replaces it, so that nobody can lock the holder
// out by seeding one. The holder may also remove a record at or above its epoch: fence-on-acquire does,
// so that a raise of a record equal to the new epoch still commits a write.
func (r *Request) record(l *Lease, epoch int64) *fencing.Error {
	if r.foreign() {
		return nil // a Scale, an Eviction, a Binding: no record of the object to hold
	}
	key := fencingv1alpha1.ObjectEpochAnnotation
	oldRaw, oldSet := annotationOK(r.Old, key)
	newRaw, newSet := annotationOK(r.New, key)
	want := strconv.FormatInt(epoch, 10)
	switch {
	case newSet && newRaw == want:
		return nil
	case r.Subresource != "" && newSet == oldSet && newRaw == oldRaw:
		return nil // most status strategies ignore metadata: the record stays as stored
	case !newSet && oldSet:
		if r.facts.recordOK && r.facts.record >= epoch {
			return nil
		}
	case newSet == oldSet && newRaw == oldRaw && r.onlyClearsMarks():
		return nil // fence-on-acquire clears a marker or hold on an object it leaves unraised, its record as stored
	}
	got := "no annotation " + key
	if newSet {
		got = key + "=" + strconv.Quote(newRaw)
	}
	return r.errAt(FieldObjectEpoch, protocol.ReasonInvalid, epoch, l.Epoch,
		"%s: the write presents epoch %d but the object would carry %s: a fenced write sets %s to the epoch it presents",
		r.what(), epoch, got, key)
}

// marker holds a deletion marker the write sets to the presented epoch. What makes a marker authorise one
// delete is the delete's precondition (decideDelete): a marker left by a DELETE that did not happen, or
// written before any policy covered the object, authorises nothing by itself.
func (r *Request) marker(l *Lease, epoch int64) *fencing.Error {
	if r.foreign() || r.New == nil {
		return nil
	}
	key := fencingv1alpha1.DeleteAtEpochAnnotation
	stored, storedSet := annotationOK(r.Old, key)
	got, set := annotationOK(r.New, key)
	if want := strconv.FormatInt(epoch, 10); set && (!storedSet || got != stored) && got != want {
		return r.errAt(FieldDeleteAtEpoch, protocol.ReasonInvalid, epoch, l.Epoch,
			"%s: the deletion marker %s=%q must be the presented epoch %d", r.what(), key, got, epoch)
	}
	return nil
}

// decideDelete decides a DELETE. Anyone (with RBAC) may delete once the Lease is missing, released or
// expired. While it has a live holder: break-glass users; the garbage collector (owner references are
// fenced, so the owners whose absence makes it delete are the holder's); the namespace controller in a
// terminating namespace; a delete of an object whose deletion was already admitted that leaves it as it is
// (deletionChange); a cluster controller deleting a covered Pod its work deletes (deletesPod: one its
// workload controls, or one a node runs); and the acquiring user, only if the stored deletion marker is
// the Lease's current epoch and the delete carries the stored resourceVersion as its precondition. A
// DELETE carries no token, so the holder writes the marker with its token first, then deletes with that
// write's resourceVersion as the precondition (pkg/fencing's Writer and NewClient do both): a stale
// replica of the same user holds an older epoch and cannot write the current marker, and a bare DELETE
// (kubectl, a stale replica's plain client) names no resourceVersion, so a marker left in place by a
// delete that did not happen, or written before any policy covered the object, is no use to it.
func decideDelete(r *Request, l *Lease, now time.Time) Verdict {
	switch {
	case r.User.breakGlass():
		return admit
	case r.Old != nil && r.Old.GetDeletionTimestamp() != nil && r.deletionChange() == "":
		return admit
	case r.User.is(NamespaceControllerUser) && r.NamespaceTerminating:
		return admit
	}
	orphans := r.orphansByOptions()
	if who := r.controllerDelete(); who != "" && !orphans {
		return admit
	}
	switch {
	case l == nil || l.Source == Copy:
		return Verdict{Need: NeedQuorum}
	case !l.Live(now):
		return admit
	}
	what := r.what()
	marker, hasMarker := annotationOK(r.Old, fencingv1alpha1.DeleteAtEpochAnnotation)
	var stored int64 // a FencedResource's refusal names the epoch it holds
	if r.Class == FencedResource && r.Old != nil {
		stored, _, _ = unstructured.NestedInt64(r.Old.Object, "spec", "epoch")
	}
	switch {
	case r.User.Name != l.Acquirer:
		if change := r.deletionChange(); change != "" {
			return refuse(r.errAt(FieldPropagation, protocol.ReasonNotHolder, stored, l.Epoch,
				"%s is being deleted and %s: only the holder of lease %s (%s at epoch %d, user %q) or an admin (group %s) may change its deletion",
				what, change, r.LeaseName, l.Holder, l.Epoch, l.Acquirer, BreakGlassGroup))
		}
		if who := r.controllerDelete(); who != "" && orphans {
			return refuse(r.errAt(FieldPropagation, protocol.ReasonNotHolder, stored, l.Epoch,
				"%s: %s may delete it, but its options (%s) would orphan its dependents, which its finalizers and its resource's default would have deleted: what a delete does to the dependents is the holder's of lease %s (%s at epoch %d, user %q)",
				what, who, r.DeleteOptions, r.LeaseName, l.Holder, l.Epoch, l.Acquirer))
		}
		return refuse(r.errAt("", protocol.ReasonNotHolder, stored, l.Epoch,
			"%s %s lease %s, held by %s at epoch %d: only that holder's user %q or an admin (group %s) may delete it",
			what, r.boundTo(), r.LeaseName, l.Holder, l.Epoch, l.Acquirer, BreakGlassGroup))
	case !l.Fenced:
		return refuse(r.errAt("", protocol.ReasonLeaseMissing, stored, l.Epoch,
			"%s %s lease %s, which lacks the label %s=true: while it is live only an admin (group %s) may delete it",
			what, r.boundTo(), r.LeaseName, protocol.FencedLabel, BreakGlassGroup))
	case !hasMarker:
		return refuse(r.errAt(FieldDeleteAtEpoch, protocol.ReasonTokenMissing, 0, l.Epoch,
			"%s %s lease %s, held by %s at epoch %d: a DELETE carries no fencing token, so the holder first writes the annotation %s=%d with its token, then deletes (pkg/fencing's Writer.Delete and NewClient do both)",
			what, r.boundTo(), r.LeaseName, l.Holder, l.Epoch, fencingv1alpha1.DeleteAtEpochAnnotation, l.Epoch))
	case marker != strconv.FormatInt(l.Epoch, 10):
		markerEpoch, _ := strconv.ParseInt(marker, 10, 64)
		return refuse(r.errAt(FieldDeleteAtEpoch, protocol.ReasonStale, markerEpoch, l.Epoch,
			"%s: stale deletion marker %s=%q: lease %s is at epoch %d, held by %s",
			what, fencingv1alpha1.DeleteAtEpochAnnotation, marker, r.LeaseName, l.Epoch, l.Holder))
	case r.DeletePrecondition == "" || r.DeletePrecondition != r.Old.GetResourceVersion():
		got := "none"
		if r.DeletePrecondition != "" {
			got = strconv.Quote(r.DeletePrecondition)
		}
		return refuse(r.errAt(FieldPrecondition, protocol.ReasonTokenMissing, stored, l.Epoch,
			"%s %s lease %s, held by %s at epoch %d: a DELETE carries no fencing token, so it must name the resourceVersion %s of the holder's marker write as its precondition (pkg/fencing's Writer.Delete and NewClient do); this one names %s",
			what, r.boundTo(), r.LeaseName, l.Holder, l.Epoch, r.Old.GetResourceVersion(), got))
	}
	return admit
}

// controllerDelete names the cluster controller whose work includes this DELETE, "" if none: the garbage
// collector deleting a dependent (an object with owner references: those are fenced, so the owners whose
// absence makes it delete are the holder's; an object without any is not its to delete); a Pod-deleting
// controller deleting a Pod its work deletes (User.deletesPod); the tokens controller deleting a token
// Secret (its token names a ServiceAccount that no longer exists, and only that controller makes this
// delete); the TTL controller deleting a finished Job whose TTL the holder set (spec, fenced; the finish
// is the Job controller's status).
func (r *Request) controllerDelete() string {
	switch {
	case r.Old == nil:
		return ""
	case r.User.is(GarbageCollectorUser) && len(r.Old.GetOwnerReferences()) > 0:
		return "the garbage collector"
	case r.Class == Object && r.Kind == "Pod" && r.User.deletesPod(r.Old):
		return "the cluster controller " + strconv.Quote(r.User.Name) + ", whose work deletes this Pod,"
	case r.Class == Object && r.Kind == "Secret" && r.User.is(TokenControllerUser) && secretType(r.Old) == "kubernetes.io/service-account-token":
		return "the tokens controller"
	case r.Class == Object && r.Kind == "Job" && r.User.is(TTLControllerUser) && finishedWithTTL(r.Old):
		return "the TTL controller"
	}
	return ""
}

// orphansByOptions reports whether r's DELETE options would orphan the dependents where the object's own
// deletion finalizers and its resource's default would have them deleted: a controller may decide that an
// object goes, never what becomes of what it owns (I4).
func (r *Request) orphansByOptions() bool {
	orphan, foreground := deletionFinalizers(r.Old)
	byDefault, _ := DeleteOptions{DefaultOrphans: r.DeleteOptions.DefaultOrphans}.finalizers(orphan, foreground)
	withOptions, _ := r.DeleteOptions.finalizers(orphan, foreground)
	return withOptions && !byDefault
}

// deletionChange says what a DELETE of an object whose deletion was already admitted would change, ""
// for nothing. Anyone may send one, and without options it changes nothing; with options the apiserver
// applies them to the deletion in progress: a propagation policy rewrites the deletion finalizers (orphan
// the dependents the holder's delete was deleting, or the reverse), a shorter grace period hurries a Pod's
// end. Such a DELETE is decided like a first one.
func (r *Request) deletionChange() string {
	orphan, foreground := deletionFinalizers(r.Old)
	if o, f := r.DeleteOptions.finalizers(orphan, foreground); o != orphan || f != foreground {
		return fmt.Sprintf("its options (%s) would have its dependents %s instead of %s", r.DeleteOptions, dependents(o, f), dependents(orphan, foreground))
	}
	if g, current := r.DeleteOptions.GracePeriodSeconds, r.Old.GetDeletionGracePeriodSeconds(); g != nil && current != nil && *g < *current {
		return fmt.Sprintf("its options (%s) would shorten the grace period of %d s", r.DeleteOptions, *current)
	}
	return ""
}

// finalizers are the deletion finalizers the apiserver would leave on an object that holds orphan and
// foreground after a DELETE with o (k8s.io/apiserver's shouldOrphanDependents and shouldDeleteDependents):
// orphanDependents wins over propagationPolicy, which wins over the finalizers already there, which win
// over the resource's default (DefaultOrphans).
func (o DeleteOptions) finalizers(orphan, foreground bool) (bool, bool) {
	switch {
	case o.OrphanDependents != nil:
		return *o.OrphanDependents, false
	case o.PropagationPolicy != nil:
		p := *o.PropagationPolicy
		return p == "Orphan", p == "Foreground"
	case orphan || foreground:
		return orphan, foreground
	}
	return o.DefaultOrphans, false
}

func (o DeleteOptions) String() string {
	var s []string
	if o.OrphanDependents != nil {
		s = append(s, "orphanDependents="+strconv.FormatBool(*o.OrphanDependents))
	}
	if o.PropagationPolicy != nil {
		s = append(s, "propagationPolicy="+*o.PropagationPolicy)
	}
	if o.GracePeriodSeconds != nil {
		s = append(s, "gracePeriodSeconds="+strconv.FormatInt(*o.GracePeriodSeconds, 10))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// dependents says what a deletion does to the dependents, given its deletion finalizers.
func dependents(orphan, foreground bool) string {
	switch {
	case orphan:
		return "orphaned"
	case foreground:
		return "deleted first (foreground)"
	}
	return "deleted in the background"
}

// finishedWithTTL reports whether Job u sets ttlSecondsAfterFinished and has finished (a Complete or
// Failed condition that is True).
func finishedWithTTL(u *unstructured.Unstructured) bool {
	if u == nil {
		return false
	}
	if _, found, _ := unstructured.NestedInt64(u.Object, "spec", "ttlSecondsAfterFinished"); !found {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if (m["type"] == "Complete" || m["type"] == "Failed") && m["status"] == "True" {
			return true
		}
	}
	return false
}

func (r *Request) errAt(field string, reason protocol.Reason, epoch, leaseEpoch int64, format string, args ...any) *fencing.Error {
	e := &fencing.Error{Reason: reason, Resource: r.key(), Lease: r.LeaseName, Epoch: epoch, LeaseEpoch: leaseEpoch,
		Field: field, Message: fmt.Sprintf(format, args...)}
	if r.Class == Object || r.Class == FencedLease {
		e.Kind = r.Kind
		if e.Field == "" {
			e.Field = FieldFieldManager
		}
	}
	return e
}

// managerOf names r's field manager in a refusal.
func managerOf(r *Request) string {
	if r.FieldManager == "" {
		return "no field manager"
	}
	return "field manager " + strconv.Quote(r.FieldManager)
}

// it names the object again in a message: "it" for an object, "FencedResource ns/name" for a
// FencedResource, as refusals have always said it.
func (r *Request) it() string {
	if r.Class == FencedResource {
		return r.what()
	}
	return "it"
}

// boundTo is how a message says the object belongs to its Lease.
func (r *Request) boundTo() string {
	if r.Class == FencedResource {
		return "is bound to"
	}
	return "is fenced by"
}

func annotation(u *unstructured.Unstructured, key string) string {
	v, _ := annotationOK(u, key)
	return v
}

func annotationOK(u *unstructured.Unstructured, key string) (string, bool) {
	if u == nil {
		return "", false
	}
	v, ok := u.GetAnnotations()[key]
	return v, ok
}

// jsonSize is the size of v encoded as JSON; a value that cannot be encoded counts as larger than any bound.
func jsonSize(v any) int {
	if raw, ok := v.(json.RawMessage); ok { // as the webhook decodes a FencedResource's data
		return len(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return math.MaxInt
	}
	return len(b)
}

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
