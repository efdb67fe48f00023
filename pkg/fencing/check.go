package fencing

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// BreakGlassGroup is the group whose members may write a FencedResource without being the Lease's acquirer
// (the epoch rules still apply) and may delete a FencedResource whose Lease has a live holder. Members of
// system:masters have the same rights. Grant it only for recovery.
const BreakGlassGroup = "fencekit:breakglass"

// Requester is the authenticated user making a write, as the apiserver reports it to admission.
type Requester struct {
	Username string
	Groups   []string
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
	switch epoch, err := strconv.ParseInt(raw, 10, 64); {
	case !ok:
		v.EpochErr = "it has no " + elector.EpochAnnotation + " annotation (no fencekit elector has acquired it)"
	case err != nil || epoch < 1:
		v.EpochErr = "its " + elector.EpochAnnotation + " annotation " + strconv.Quote(raw) + " is not an epoch >= 1"
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

// TouchesFencedFields reports whether a write from old (nil on create) to new sets or changes what only the
// holder may write: spec.data, spec.epoch or the writer annotation. Writes that touch none of them
// (declaring the binding, labels, annotations) need no holder.
func TouchesFencedFields(old, new *fencingv1alpha1.FencedResource) bool {
	if old == nil {
		return new.Spec.Epoch != 0 || !emptyData(new.Spec.Data) || new.Annotations[fencingv1alpha1.WriterAnnotation] != ""
	}
	return old.Spec.Epoch != new.Spec.Epoch ||
		old.Annotations[fencingv1alpha1.WriterAnnotation] != new.Annotations[fencingv1alpha1.WriterAnnotation] ||
		!sameData(old.Spec.Data, new.Spec.Data)
}

func emptyData(d *runtime.RawExtension) bool {
	return d == nil || len(d.Raw) == 0 || string(d.Raw) == "null"
}

func sameData(a, b *runtime.RawExtension) bool {
	if emptyData(a) || emptyData(b) {
		return emptyData(a) == emptyData(b)
	}
	var va, vb any
	if json.Unmarshal(a.Raw, &va) != nil || json.Unmarshal(b.Raw, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// CheckWrite decides whether the write of fr (from old, nil on create) by req is fenced, given the bound
// Lease as read now (nil if it does not exist). It returns nil to admit the write. It is the whole decision
// of fencekit's admission webhook, as a pure function.
func CheckWrite(old, fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease, req Requester, now time.Time) *Error {
	if !TouchesFencedFields(old, fr) {
		return nil
	}
	key := fr.Namespace + "/" + fr.Name
	epoch := fr.Spec.Epoch
	leaseName := fr.Spec.LeaseName
	if fr.Spec.Data != nil && len(fr.Spec.Data.Raw) > fencingv1alpha1.MaxDataBytes {
		return errorf(ReasonInvalid, key, leaseName, epoch, 0,
			"FencedResource %s: spec.data is %d bytes, over the bound of %d bytes", key, len(fr.Spec.Data.Raw), fencingv1alpha1.MaxDataBytes)
	}
	if lease == nil {
		return errorf(ReasonLeaseMissing, key, leaseName, epoch, 0,
			"lease %s not found in namespace %s: FencedResource %s cannot be written at epoch %d until an elector holds that lease",
			leaseName, fr.Namespace, key, epoch)
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
			"stale epoch %d: lease %s is at epoch %d, held by %s", epoch, leaseName, l.Epoch, holder)
	case epoch > l.Epoch:
		return errorf(ReasonFutureEpoch, key, leaseName, epoch, l.Epoch,
			"epoch %d was never issued: lease %s is at epoch %d, held by %s", epoch, leaseName, l.Epoch, holder)
	case l.Holder == "":
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"lease %s at epoch %d has no holder (it was released): nobody may write FencedResource %s", leaseName, l.Epoch, key)
	case l.Duration <= 0 || l.RenewTime.IsZero():
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"lease %s at epoch %d has no valid renewTime or leaseDurationSeconds: its holder %s cannot be shown to be live", leaseName, l.Epoch, l.Holder)
	case now.After(l.RenewTime.Add(l.Duration)):
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"lease %s at epoch %d expired %s ago (held by %s, last renewed %s, duration %s)",
			leaseName, l.Epoch, now.Sub(l.RenewTime.Add(l.Duration)).Round(time.Millisecond), l.Holder, l.RenewTime.UTC().Format(time.RFC3339Nano), l.Duration)
	}
	if writer := fr.Annotations[fencingv1alpha1.WriterAnnotation]; writer != l.Holder {
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"write names holder %q (annotation %s) but lease %s at epoch %d is held by %s",
			writer, fencingv1alpha1.WriterAnnotation, leaseName, l.Epoch, l.Holder)
	}
	if req.Username != l.Acquirer && !req.breakGlass() {
		return errorf(ReasonNotHolder, key, leaseName, epoch, l.Epoch,
			"user %q is not the user that acquired lease %s at epoch %d (%q): only the holder %s may write FencedResource %s",
			req.Username, leaseName, l.Epoch, l.Acquirer, l.Holder, key)
	}
	return nil
}

// CheckDelete decides whether req may delete fr: its Lease's holder (the acquiring user) may, as may anyone
// when the Lease is missing, released or expired, members of BreakGlassGroup or system:masters, and
// kube-system's controllers (namespace deletion, garbage collection).
func CheckDelete(fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease, req Requester, now time.Time) *Error {
	if lease == nil || req.breakGlass() || strings.HasPrefix(req.Username, "system:serviceaccount:kube-system:") {
		return nil
	}
	l := ViewLease(lease)
	live := l.EpochErr == "" && l.Holder != "" && l.Duration > 0 && !now.After(l.RenewTime.Add(l.Duration))
	if !live || req.Username == l.Acquirer {
		return nil
	}
	key := fr.Namespace + "/" + fr.Name
	return errorf(ReasonNotHolder, key, l.Name, fr.Spec.Epoch, l.Epoch,
		"FencedResource %s is bound to lease %s, held by %s at epoch %d: only that holder's user %q or an admin (group %s) may delete it",
		key, l.Name, l.Holder, l.Epoch, l.Acquirer, BreakGlassGroup)
}
