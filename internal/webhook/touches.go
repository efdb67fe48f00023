package webhook

import (
	"bytes"
	"encoding/json"
	"reflect"

	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// mayTouchFencedFields is a cheap over-approximation of fencing.TouchesFencedFields: it is true whenever
// TouchesFencedFields is (epoch, writer, deletion marker, owner references, data), and it compares spec.data by its bytes instead of decoding the old and the new
// data (up to MaxDataBytes each), which CheckWrite does anyway. The handler used to decode them twice:
// once here, to decide whether to read the Lease, and once in CheckWrite.
//
// Equal bytes of valid JSON are equal data. Different bytes are taken as a change: the Lease is read and
// CheckWrite, which decides exactly, admits the write if the data only differs in its encoding (the
// apiserver encodes both objects the same way, so this does not happen in practice). The only cost of
// that case is the Lease read, and a refusal if the Lease cannot be read (fail closed).
func mayTouchFencedFields(old, fr *fencingv1alpha1.FencedResource) bool {
	if old == nil {
		return fencing.TouchesFencedFields(nil, fr) // a create decodes no data
	}
	if old.Spec.Epoch != fr.Spec.Epoch ||
		old.Annotations[fencingv1alpha1.WriterAnnotation] != fr.Annotations[fencingv1alpha1.WriterAnnotation] ||
		old.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation] != fr.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation] ||
		len(old.OwnerReferences) != len(fr.OwnerReferences) || (len(old.OwnerReferences) > 0 && !reflect.DeepEqual(old.OwnerReferences, fr.OwnerReferences)) {
		return true
	}
	a, b := rawData(old.Spec.Data), rawData(fr.Spec.Data)
	switch {
	case a == nil && b == nil:
		return false
	case !bytes.Equal(a, b):
		return true
	default:
		return !json.Valid(a) // as TouchesFencedFields, which cannot compare data it cannot decode
	}
}

// rawData is d's JSON, nil when fencing counts it as empty (absent, zero bytes or null).
func rawData(d *runtime.RawExtension) []byte {
	if d == nil || len(d.Raw) == 0 || string(d.Raw) == "null" {
		return nil
	}
	return d.Raw
}
