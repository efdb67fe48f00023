package fencing

import (
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// CheckDelete decides whether req may delete fr, given its bound Lease (nil if it does not exist) and fr's
// Namespace (read only for the namespace controller; nil otherwise or if it does not exist). It returns nil
// to admit the delete.
//
// Anyone (with RBAC) may delete once the Lease is missing, released or expired. While the Lease has a live
// holder:
//   - members of system:masters and BreakGlassGroup may;
//   - the garbage collector may (GarbageCollectorUser): owner references are fenced, so the owners whose
//     absence makes it delete are the ones the holder set;
//   - the namespace controller may (NamespaceControllerUser), only while the namespace is terminating;
//   - the acquiring user may, only if the stored deletion marker (DeleteAtEpochAnnotation) is the Lease's
//     current epoch. A DELETE cannot carry a token, so the holder first writes the marker with its token
//     (a fenced write), then deletes (Writer.Delete). A stale replica of the same user holds an older epoch:
//     it cannot write the current marker, and the marker it wrote before is outdated by the new epoch.
//
// Every other kube-system ServiceAccount follows the rules of any user.
func CheckDelete(fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease, ns *corev1.Namespace, req Requester, now time.Time) *Error {
	switch {
	case req.breakGlass(), req.Username == GarbageCollectorUser:
		return nil
	case req.Username == NamespaceControllerUser && terminating(ns):
		return nil
	case lease == nil:
		return nil
	}
	l := ViewLease(lease)
	live := l.EpochErr == "" && l.Holder != "" && l.Duration > 0 && !now.After(l.RenewTime.Add(l.Duration))
	if !live {
		return nil
	}
	key := fr.Namespace + "/" + fr.Name
	marker, hasMarker := fr.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation]
	switch {
	case req.Username != l.Acquirer:
		return errorf(ReasonNotHolder, key, l.Name, fr.Spec.Epoch, l.Epoch,
			"FencedResource %s is bound to lease %s, held by %s at epoch %d: only that holder's user %q or an admin (group %s) may delete it",
			key, l.Name, l.Holder, l.Epoch, l.Acquirer, BreakGlassGroup)
	case !isFenced(lease):
		return errorf(ReasonLeaseMissing, key, l.Name, fr.Spec.Epoch, l.Epoch,
			"FencedResource %s is bound to lease %s, which lacks the label %s=true: its acquirer is not guarded by fencekit's Lease policy, so while it is live only an admin (group %s) may delete the resource",
			key, l.Name, elector.FencedLabel, BreakGlassGroup)
	case !hasMarker:
		return errorAt(FieldDeleteAtEpoch, ReasonTokenMissing, key, l.Name, 0, l.Epoch,
			"FencedResource %s is bound to lease %s, held by %s at epoch %d: a DELETE carries no fencing token, so the holder first writes the annotation %s=%d with its token, then deletes (pkg/fencing's Writer.Delete does both)",
			key, l.Name, l.Holder, l.Epoch, fencingv1alpha1.DeleteAtEpochAnnotation, l.Epoch)
	case marker != strconv.FormatInt(l.Epoch, 10):
		markerEpoch, _ := strconv.ParseInt(marker, 10, 64)
		return errorAt(FieldDeleteAtEpoch, ReasonStale, key, l.Name, markerEpoch, l.Epoch,
			"FencedResource %s: stale deletion marker %s=%q: lease %s is at epoch %d, held by %s",
			key, fencingv1alpha1.DeleteAtEpochAnnotation, marker, l.Name, l.Epoch, l.Holder)
	}
	return nil
}

func terminating(ns *corev1.Namespace) bool {
	return ns != nil && (ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating)
}
