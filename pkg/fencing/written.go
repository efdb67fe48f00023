package fencing

import (
	"bytes"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

// recordKeys are the annotations a raise writes with the token: the epoch record, the deletion marker and
// the hold. They record a term, not content the holder wrote.
var recordKeys = []string{fencingv1alpha1.ObjectEpochAnnotation, fencingv1alpha1.DeleteAtEpochAnnotation,
	fencingv1alpha1.HoldAtEpochAnnotation, fencingv1alpha1.WriterAnnotation}

// HolderWrote reports whether a holder wrote content to the object u: a managedFields entry of a token's
// field manager (fencing.fencekit.io/epoch=N) owns a field other than fencekit's record annotations. An
// object that fence-on-acquire only raised carries an epoch record but no such field, so a raise within
// its budget never makes an object count as written, and neither does a record anyone wrote before a
// policy covered the object. fence-on-acquire raises every object a holder wrote, and the webhook decides
// a write on its copy of the Lease only to such an object.
func HolderWrote(u *unstructured.Unstructured) bool {
	for _, e := range u.GetManagedFields() {
		if !strings.HasPrefix(e.Manager, elector.FieldManagerPrefix) || e.FieldsV1 == nil {
			continue
		}
		var set fieldpath.Set
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())); err != nil {
			return true // unreadable: count it as written (raised in full, decided on a quorum read)
		}
		content := false
		set.Leaves().Iterate(func(p fieldpath.Path) {
			if !recordAnnotation(p) {
				content = true
			}
		})
		if content {
			return true
		}
	}
	return false
}

// recordAnnotation reports whether p is metadata.annotations[k] for one of fencekit's record keys, or the
// annotations map (or metadata) itself, which an entry keeps owning after the raise that created the map
// has handed its key on to the next epoch's entry.
func recordAnnotation(p fieldpath.Path) bool {
	field := func(i int, name string) bool { return p[i].FieldName != nil && *p[i].FieldName == name }
	switch len(p) {
	case 1:
		return field(0, "metadata")
	case 2:
		return field(0, "metadata") && field(1, "annotations")
	case 3:
		return field(0, "metadata") && field(1, "annotations") && p[2].FieldName != nil && slices.Contains(recordKeys, *p[2].FieldName)
	}
	return false
}
