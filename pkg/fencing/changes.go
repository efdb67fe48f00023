package fencing

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// The fenced fields of a FencedResource, as refusals name them. Only the holder, presenting its token in the
// request, may set or change them. Everything else (labels, other annotations, finalizers, the declaration
// spec.leaseName) is free: declaring is free, writing is fenced.
const (
	FieldEpoch           = "spec.epoch"
	FieldData            = "spec.data"
	FieldWriter          = "metadata.annotations[" + fencingv1alpha1.WriterAnnotation + "]"
	FieldDeleteAtEpoch   = "metadata.annotations[" + fencingv1alpha1.DeleteAtEpochAnnotation + "]"
	FieldOwnerReferences = "metadata.ownerReferences"
)

// FencedChanges lists the fenced fields that a write from old (nil on create) to new sets or changes, in a
// fixed order: spec.epoch, spec.data, the writer annotation, the deletion marker, metadata.ownerReferences.
//
// Owner references are fenced because they delete: an owner reference to an object that does not exist
// (or that is then deleted) makes the garbage collector delete the FencedResource, data and all. They are
// fenced on update only: a create holds no fenced data unless it also sets spec.data or spec.epoch, which
// are checked, so a parent controller may still create FencedResources it owns. Finalizers are free: a
// finalizer can only delay the removal of an object whose deletion was already admitted; it can neither
// delete it nor change its data.
func FencedChanges(old, new *fencingv1alpha1.FencedResource) []string {
	var changed []string
	if old == nil {
		old = &fencingv1alpha1.FencedResource{}
		// The owner references of a create are free; see above.
		old.OwnerReferences = new.OwnerReferences
	}
	if old.Spec.Epoch != new.Spec.Epoch {
		changed = append(changed, FieldEpoch)
	}
	if !SameData(old.Spec.Data, new.Spec.Data) {
		changed = append(changed, FieldData)
	}
	if old.Annotations[fencingv1alpha1.WriterAnnotation] != new.Annotations[fencingv1alpha1.WriterAnnotation] {
		changed = append(changed, FieldWriter)
	}
	if old.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation] != new.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation] {
		changed = append(changed, FieldDeleteAtEpoch)
	}
	if !sameOwnerReferences(old.OwnerReferences, new.OwnerReferences) {
		changed = append(changed, FieldOwnerReferences)
	}
	return changed
}

// TouchesFencedFields reports whether a write from old (nil on create) to new sets or changes any fenced
// field (see FencedChanges). Writes that touch none of them (declaring the binding, labels, annotations,
// finalizers) need no holder.
func TouchesFencedFields(old, new *fencingv1alpha1.FencedResource) bool {
	return len(FencedChanges(old, new)) > 0
}

func sameOwnerReferences(a, b []metav1.OwnerReference) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// onlyRemoves reports whether new is old with some entries removed (and none added or changed).
func onlyRemoves(old, new []metav1.OwnerReference) bool {
	if len(new) >= len(old) {
		return false
	}
	i := 0
	for _, ref := range new {
		for i < len(old) && !reflect.DeepEqual(old[i], ref) {
			i++
		}
		if i == len(old) {
			return false
		}
		i++
	}
	return true
}

func emptyData(d *runtime.RawExtension) bool {
	return d == nil || len(d.Raw) == 0 || string(d.Raw) == "null"
}

// SameData reports whether two spec.data values hold the same JSON, exactly: key order and white space do
// not matter, numbers are compared as the decimal text they are written in (never as float64, which cannot
// tell 9007199254740993 from 9007199254740992). Two spellings of one number (1 and 1.0) count as a change,
// which only ever makes a write need the token; the apiserver encodes stored numbers one way.
func SameData(a, b *runtime.RawExtension) bool {
	if emptyData(a) || emptyData(b) {
		return emptyData(a) == emptyData(b)
	}
	if bytes.Equal(a.Raw, b.Raw) {
		return json.Valid(a.Raw)
	}
	va, errA := decodeExact(a.Raw)
	vb, errB := decodeExact(b.Raw)
	if errA != nil || errB != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

var errTrailingData = errors.New("data after the JSON value")

// decodeExact decodes one JSON value, keeping numbers as json.Number (their exact text).
func decodeExact(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailingData
	}
	return v, nil
}
