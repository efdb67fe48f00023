package fencing

import (
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// ObjectWrite is a write of an object declared by a FencingPolicy, as admission sees it.
type ObjectWrite struct {
	// Kind and Key name the object in refusals ("ConfigMap", "ns/name").
	Kind, Key string
	// Policy is the FencingPolicy that declares the object ("ns/name"), Lease its Lease's name.
	Policy, Lease string
	// Subresource is the request's subresource ("" for the object itself, "status", "scale", ...).
	Subresource string
	// Old is the stored object (nil on create), New the object the write results in. For a subresource
	// whose object is of another kind (scale, eviction, binding), they are that object.
	Old, New *unstructured.Unstructured
}

// Fields of an object that everyone may change without a token: a finalizer can only delay the removal
// of an object whose deletion was already admitted, and the rest is kept by the apiserver itself.
var freeMetadata = []string{"finalizers", "managedFields", "resourceVersion", "generation", "deletionTimestamp",
	"deletionGracePeriodSeconds", "uid", "creationTimestamp", "selfLink"}

// FieldObjectEpoch is the epoch record of an object declared by a FencingPolicy, as refusals name it.
const FieldObjectEpoch = "metadata.annotations[" + fencingv1alpha1.ObjectEpochAnnotation + "]"

// ObjectChanges lists the fields of w that the write sets or changes and that only the holder may: every
// top-level field but metadata ("spec", "data", "status", ...) and every metadata field but the finalizers
// and what the apiserver keeps itself ("metadata.labels", "metadata.annotations",
// "metadata.ownerReferences"), sorted. A create changes every field it sets.
func ObjectChanges(old, new *unstructured.Unstructured) []string {
	var o, n map[string]any
	if old != nil {
		o = old.Object
	}
	if new != nil {
		n = new.Object
	}
	var changed []string
	for _, k := range unionKeys(o, n) {
		switch k {
		case "apiVersion", "kind":
			continue
		case "metadata":
			om, _ := o[k].(map[string]any)
			nm, _ := n[k].(map[string]any)
			for _, mk := range unionKeys(om, nm) {
				if slices.Contains(freeMetadata, mk) || emptyValue(om[mk]) && emptyValue(nm[mk]) {
					continue
				}
				if !reflect.DeepEqual(om[mk], nm[mk]) {
					changed = append(changed, "metadata."+mk)
				}
			}
		default:
			if !(emptyValue(o[k]) && emptyValue(n[k])) && !reflect.DeepEqual(o[k], n[k]) {
				changed = append(changed, k)
			}
		}
	}
	sort.Strings(changed)
	return changed
}

func unionKeys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func emptyValue(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	case string:
		return v == ""
	}
	return false
}

// systemController reports whether req is one of the cluster's own controllers: a kube-system
// ServiceAccount (kube-controller-manager's controllers), kube-controller-manager or kube-scheduler
// themselves, or a kubelet (group system:nodes, held to its own node's Pods by NodeRestriction).
func (r Requester) systemController() bool {
	return strings.HasPrefix(r.Username, "system:serviceaccount:kube-system:") ||
		r.Username == "system:kube-controller-manager" || r.Username == "system:kube-scheduler" ||
		slices.Contains(r.Groups, "system:nodes")
}

// CheckObjectWrite decides whether req may make the write w of an object declared by a FencingPolicy
// bound to lease (nil if it does not exist). It returns nil to admit the write. It is the whole decision of
// fencekit's object webhook for creates and updates (patches, server-side applies, subresources), as a
// pure function.
//
// Free, without a token:
//   - a write that changes nothing but finalizers and what the apiserver keeps (ObjectChanges is empty);
//   - the cluster's own controllers (systemController) writing the status or binding subresource (a
//     kubelet reporting a Pod's status, kube-controller-manager a Deployment's, the scheduler binding a
//     Pod), if they leave fencekit's annotations alone;
//   - the garbage collector removing owner references (orphaning): it deletes nothing.
//
// Every other write, and any write that presents a token, needs the holder's token in the request (the
// field manager): the Lease fenced and live at exactly the presented epoch, the requester its acquirer
// (break-glass users skip only that check), and, per object, the epoch record (ObjectEpochAnnotation)
// new == presented >= stored, so that an object's stored epoch never goes down. A write of the object
// itself must set the record; a subresource write may leave it as stored. A deletion marker it sets must be
// the presented epoch. Everything else a stale holder might do (a merge patch, an Update, a server-side
// apply that leaves the annotation out, kubectl) presents no token or an old one, and is refused.
func CheckObjectWrite(w ObjectWrite, lease *coordinationv1.Lease, req Requester, now time.Time) *Error {
	changed := ObjectChanges(w.Old, w.New)
	presents := strings.HasPrefix(req.FieldManager, elector.FieldManagerPrefix)
	what := w.Kind + " " + w.Key
	if !presents {
		switch {
		case len(changed) == 0:
			return nil
		case (w.Subresource == "status" || w.Subresource == "binding") && req.systemController() && !changesFencekitAnnotations(w):
			return nil
		case w.Subresource == "" && w.Old != nil && req.Username == GarbageCollectorUser &&
			slices.Equal(changed, []string{FieldOwnerReferences}) && onlyRemovesRefs(w.Old, w.New):
			return nil
		}
		manager := "no field manager"
		if req.FieldManager != "" {
			manager = "field manager " + strconv.Quote(req.FieldManager)
		}
		field := changed[0]
		return objectErr(w, field, ReasonTokenMissing, 0, 0,
			"%s: this write changes %s but presents no fencing token (%s): FencingPolicy %s lets only the holder of lease %s write it, "+
				"with fieldManager=%s<its epoch> (pkg/fencing's NewClient does)",
			what, strings.Join(changed, ", "), manager, w.Policy, w.Lease, elector.FieldManagerPrefix)
	}
	epoch, ok := elector.EpochFromFieldManager(req.FieldManager)
	if !ok {
		return objectErr(w, "fieldManager", ReasonInvalid, 0, 0,
			"%s: field manager %q is not a valid fencing token: want %sN, N a decimal in [1, %d] without sign or leading zeros",
			what, req.FieldManager, elector.FieldManagerPrefix, elector.MaxEpoch)
	}
	l, ferr := liveLease(w, what, lease, epoch, now)
	if ferr != nil {
		return ferr
	}
	if req.Username != l.Acquirer && !req.breakGlass() {
		return objectErr(w, "", ReasonNotHolder, epoch, l.Epoch,
			"%s: user %q is not the user that acquired lease %s at epoch %d (%q): only the holder %s may write it (FencingPolicy %s)",
			what, req.Username, w.Lease, l.Epoch, l.Acquirer, l.Holder, w.Policy)
	}
	return checkRecord(w, what, epoch, l.Epoch)
}

// liveLease checks that lease is a fenced Lease, live at exactly epoch.
func liveLease(w ObjectWrite, what string, lease *coordinationv1.Lease, epoch int64, now time.Time) (LeaseView, *Error) {
	if lease == nil {
		return LeaseView{}, objectErr(w, "", ReasonLeaseMissing, epoch, 0,
			"%s: lease %s named by FencingPolicy %s does not exist: nobody may write it at epoch %d until an elector holds that lease",
			what, w.Lease, w.Policy, epoch)
	}
	if !isFenced(lease) {
		return LeaseView{}, objectErr(w, "", ReasonLeaseMissing, epoch, 0,
			"%s: lease %s lacks the label %s=true, so its epochs are not guarded by fencekit's Lease policy and prove nothing",
			what, w.Lease, elector.FencedLabel)
	}
	l := ViewLease(lease)
	if l.EpochErr != "" {
		return l, objectErr(w, "", ReasonLeaseMissing, epoch, 0, "%s: lease %s cannot fence it: %s", what, w.Lease, l.EpochErr)
	}
	holder := l.Holder
	if holder == "" {
		holder = "nobody"
	}
	switch {
	case epoch < l.Epoch:
		return l, objectErr(w, "", ReasonStale, epoch, l.Epoch,
			"%s: stale epoch %d: lease %s is at epoch %d, held by %s", what, epoch, w.Lease, l.Epoch, holder)
	case epoch > l.Epoch:
		return l, objectErr(w, "", ReasonFutureEpoch, epoch, l.Epoch,
			"%s: epoch %d was never issued: lease %s is at epoch %d, held by %s", what, epoch, w.Lease, l.Epoch, holder)
	case l.Holder == "":
		return l, objectErr(w, "", ReasonNotHolder, epoch, l.Epoch,
			"%s: lease %s at epoch %d has no holder (it was released): nobody may write it", what, w.Lease, l.Epoch)
	case l.Duration <= 0 || l.RenewTime.IsZero():
		return l, objectErr(w, "", ReasonNotHolder, epoch, l.Epoch,
			"%s: lease %s at epoch %d has no valid renewTime or leaseDurationSeconds: its holder %s cannot be shown to be live",
			what, w.Lease, l.Epoch, l.Holder)
	case now.After(l.RenewTime.Add(l.Duration)):
		return l, objectErr(w, "", ReasonNotHolder, epoch, l.Epoch,
			"%s: lease %s at epoch %d expired %s ago (held by %s, last renewed %s, duration %s)",
			what, w.Lease, l.Epoch, now.Sub(l.RenewTime.Add(l.Duration)).Round(time.Millisecond), l.Holder,
			l.RenewTime.UTC().Format(time.RFC3339Nano), l.Duration)
	}
	return l, nil
}

// checkRecord holds the object's epoch record to new == presented >= stored, and a deletion marker the
// write sets to the presented epoch.
func checkRecord(w ObjectWrite, what string, epoch, leaseEpoch int64) *Error {
	if w.Subresource != "" && !isObjectOf(w) {
		return nil // a Scale, an Eviction, a Binding: no record of the object to check
	}
	key := fencingv1alpha1.ObjectEpochAnnotation
	oldRaw, oldSet := annotation(w.Old, key)
	newRaw, newSet := annotation(w.New, key)
	if oldSet {
		stored, err := strconv.ParseInt(oldRaw, 10, 64)
		if err == nil && stored > epoch {
			return objectErr(w, FieldObjectEpoch, ReasonStale, epoch, leaseEpoch,
				"%s: stale epoch %d: the object has already been written at epoch %d (annotation %s)", what, epoch, stored, key)
		}
	}
	want := strconv.FormatInt(epoch, 10)
	// A subresource write may leave the record as stored (the status strategy of most kinds ignores
	// metadata); the object itself is always stamped.
	mayKeep := w.Subresource != "" && newSet == oldSet && newRaw == oldRaw
	if !mayKeep && (!newSet || newRaw != want) {
		got := "no annotation " + key
		if newSet {
			got = key + "=" + strconv.Quote(newRaw)
		}
		return objectErr(w, FieldObjectEpoch, ReasonInvalid, epoch, leaseEpoch,
			"%s: the write presents epoch %d but the object would carry %s: a fenced write sets %s to the epoch it presents",
			what, epoch, got, key)
	}
	oldMarker, _ := annotation(w.Old, fencingv1alpha1.DeleteAtEpochAnnotation)
	if marker, set := annotation(w.New, fencingv1alpha1.DeleteAtEpochAnnotation); set && marker != oldMarker && marker != want {
		return objectErr(w, FieldDeleteAtEpoch, ReasonInvalid, epoch, leaseEpoch,
			"%s: the deletion marker %s=%q must be the presented epoch %d", what, fencingv1alpha1.DeleteAtEpochAnnotation, marker, epoch)
	}
	return nil
}

// CheckObjectDelete decides whether req may delete obj, an object declared by a FencingPolicy bound to
// lease (nil if it does not exist), ns its Namespace (read only for the namespace controller). The rules are
// CheckDelete's: anyone once the Lease has no live holder; while it has one, break-glass users, the garbage
// collector (owner references are fenced, so the owners it acts on are the holder's), the namespace
// controller in a terminating namespace, and the acquiring user only if the stored deletion marker
// (DeleteAtEpochAnnotation, written first with the token: NewClient's Delete does) is the Lease's current
// epoch. A stale replica of the holder's user cannot write the current marker.
//
// Two more deletes are free: one of an object whose deletion was already admitted (deletionTimestamp set:
// a kubelet finishing a Pod's graceful deletion only completes it), and the cluster's own controllers'
// deletes of Pods (a kubelet, the node lifecycle and pod garbage collectors clean up Pods of lost nodes).
func CheckObjectDelete(w ObjectWrite, lease *coordinationv1.Lease, ns *corev1.Namespace, req Requester, now time.Time) *Error {
	switch {
	case req.breakGlass(), req.Username == GarbageCollectorUser, lease == nil:
		return nil
	case w.Old != nil && w.Old.GetDeletionTimestamp() != nil:
		return nil
	case w.Kind == "Pod" && req.systemController():
		return nil
	case req.Username == NamespaceControllerUser && terminating(ns):
		return nil
	}
	l := ViewLease(lease)
	if live := l.EpochErr == "" && l.Holder != "" && l.Duration > 0 && !now.After(l.RenewTime.Add(l.Duration)); !live {
		return nil
	}
	what := w.Kind + " " + w.Key
	marker, hasMarker := annotation(w.Old, fencingv1alpha1.DeleteAtEpochAnnotation)
	switch {
	case req.Username != l.Acquirer:
		return objectErr(w, "", ReasonNotHolder, 0, l.Epoch,
			"%s is fenced by FencingPolicy %s, lease %s held by %s at epoch %d: only that holder's user %q or an admin (group %s) may delete it",
			what, w.Policy, w.Lease, l.Holder, l.Epoch, l.Acquirer, BreakGlassGroup)
	case !isFenced(lease):
		return objectErr(w, "", ReasonLeaseMissing, 0, l.Epoch,
			"%s is fenced by lease %s, which lacks the label %s=true: while it is live only an admin (group %s) may delete it",
			what, w.Lease, elector.FencedLabel, BreakGlassGroup)
	case !hasMarker:
		return objectErr(w, FieldDeleteAtEpoch, ReasonTokenMissing, 0, l.Epoch,
			"%s is fenced by lease %s, held by %s at epoch %d: a DELETE carries no fencing token, so the holder first writes the annotation %s=%d with its token, then deletes (pkg/fencing's NewClient does both)",
			what, w.Lease, l.Holder, l.Epoch, fencingv1alpha1.DeleteAtEpochAnnotation, l.Epoch)
	case marker != strconv.FormatInt(l.Epoch, 10):
		markerEpoch, _ := strconv.ParseInt(marker, 10, 64)
		return objectErr(w, FieldDeleteAtEpoch, ReasonStale, markerEpoch, l.Epoch,
			"%s: stale deletion marker %s=%q: lease %s is at epoch %d, held by %s",
			what, fencingv1alpha1.DeleteAtEpochAnnotation, marker, w.Lease, l.Epoch, l.Holder)
	}
	return nil
}

func annotation(u *unstructured.Unstructured, key string) (string, bool) {
	if u == nil {
		return "", false
	}
	v, ok := u.GetAnnotations()[key]
	return v, ok
}

func changesFencekitAnnotations(w ObjectWrite) bool {
	for _, key := range []string{fencingv1alpha1.ObjectEpochAnnotation, fencingv1alpha1.DeleteAtEpochAnnotation} {
		o, os := annotation(w.Old, key)
		n, ns := annotation(w.New, key)
		if o != n || os != ns {
			return true
		}
	}
	return false
}

// isObjectOf reports whether a subresource write's objects are the declared object itself (status), rather
// than an object of another kind (Scale, Eviction, Binding) that carries none of its annotations.
func isObjectOf(w ObjectWrite) bool { return w.Subresource == "status" }

func onlyRemovesRefs(old, new *unstructured.Unstructured) bool {
	return onlyRemoves(old.GetOwnerReferences(), new.GetOwnerReferences())
}

func objectErr(w ObjectWrite, field string, reason Reason, epoch, leaseEpoch int64, format string, args ...any) *Error {
	e := errorf(reason, w.Key, w.Lease, epoch, leaseEpoch, format, args...)
	e.Field = field
	if e.Field == "" {
		e.Field = "fieldManager"
	}
	e.Kind = w.Kind
	return e
}
