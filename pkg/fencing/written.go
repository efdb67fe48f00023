package fencing

import (
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// recordKeys are the annotations a raise writes with the token: the epoch record, the deletion marker and
// the hold (and a FencedResource's writer). They record a term, not content the holder wrote.
var recordKeys = []string{fencingv1alpha1.ObjectEpochAnnotation, fencingv1alpha1.DeleteAtEpochAnnotation,
	fencingv1alpha1.HoldAtEpochAnnotation, fencingv1alpha1.WriterAnnotation}

// HolderWrote reports whether a holder wrote content to the object u: a managedFields entry of a token's
// field manager (fencing.fencekit.io/epoch=N) owns a field other than fencekit's record annotations, or
// the apiserver's ancient-changes entry, into which a holder's entries are merged, owns content. An
// object that fence-on-acquire only raised carries an epoch record but no such field, so a raise within
// its budget never makes an object count as written, and neither does a record anyone wrote before a
// policy covered the object. fence-on-acquire raises every object a holder wrote, and the webhook decides
// a write on its copy of the Lease only to such an object.
//
// It reads the managedFields as the object holds them (fieldsV1 already decoded), without converting the
// entries: the webhook asks it on every write it may decide on its copy.
func HolderWrote(u *unstructured.Unstructured) bool {
	entries, _, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
	for _, raw := range entries {
		e, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		manager, _ := e["manager"].(string)
		if manager == ancientChanges {
			if fields, ok := e["fieldsV1"].(map[string]any); ok && ownsBody(fields) {
				return true
			}
			continue
		}
		if !strings.HasPrefix(manager, protocol.FieldManagerPrefix) {
			continue
		}
		fields, ok := e["fieldsV1"].(map[string]any)
		if !ok {
			if e["fieldsV1"] != nil {
				return true // unreadable: count it as written (raised in full, decided on a quorum read)
			}
			continue
		}
		if ownsContent(fields, 0) {
			return true
		}
	}
	return false
}

// ancientChanges is the field manager of the entry the apiserver merges an object's oldest Update entries
// into once it has more than ten: the holder's among them, whenever anyone's write sets the merge off.
const ancientChanges = "ancient-changes"

// ownsBody reports whether fieldsV1 set s owns anything outside metadata and status: the object's content
// (a ConfigMap's data, a Deployment's spec). After a policy covers an object only a write with the token
// can own such a field (what others may write without it is metadata and, for the cluster's controllers,
// status), so an ancient-changes entry that owns one holds a holder's entry the apiserver merged there,
// or content written before the policy existed (docs/design/residuals.md).
func ownsBody(s map[string]any) bool {
	for k := range s {
		switch k {
		case ".", "f:metadata", "f:status", "f:apiVersion", "f:kind":
		default:
			return true
		}
	}
	return false
}

// ownsContent reports whether fieldsV1 set s, at depth 0 (the object), 1 (metadata) or 2 (annotations),
// owns anything but metadata.annotations' record keys and the maps that hold them ("." is the map itself).
func ownsContent(s map[string]any, depth int) bool {
	for k, v := range s {
		if k == "." {
			continue
		}
		switch {
		case depth == 0 && k == "f:metadata", depth == 1 && k == "f:annotations":
			child, ok := v.(map[string]any)
			if !ok || ownsContent(child, depth+1) {
				return true
			}
		case depth == 2 && strings.HasPrefix(k, "f:") && slices.Contains(recordKeys, k[2:]):
		default:
			return true
		}
	}
	return false
}

// MaxUpdateEntries is how many Update entries the apiserver keeps in an object's managedFields before it
// merges the oldest into ancient-changes (apimachinery's managedfields, DefaultMaxUpdateManagers, which
// is internal to it). The admission rule holds writes without the token to it as HolderWrote reads it.
const MaxUpdateEntries = 10

// raiseWouldWrite reports whether a raise's merge patch, which adds an Update entry of its token, could
// make u count as written: past MaxUpdateEntries the apiserver merges the oldest entries into
// ancient-changes (MergeWouldCountWritten).
func raiseWouldWrite(u *unstructured.Unstructured) bool {
	n := 0
	for _, e := range u.GetManagedFields() {
		if e.Operation == metav1.ManagedFieldsOperationUpdate {
			n++
		}
	}
	return n+1 > MaxUpdateEntries && MergeWouldCountWritten(u)
}

// MergeWouldCountWritten reports whether u would count as written (HolderWrote) once the apiserver merged
// its Update entries into ancient-changes, assuming the worst merge: every Update entry but a token's.
// Content among them, written before a policy covered u, would then count as a holder's.
func MergeWouldCountWritten(u *unstructured.Unstructured) bool {
	entries, _, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
	merged := make([]any, 0, len(entries))
	for _, raw := range entries {
		e, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		if manager, _ := e["manager"].(string); e["operation"] == "Update" && !strings.HasPrefix(manager, protocol.FieldManagerPrefix) {
			e = maps.Clone(e)
			e["manager"] = ancientChanges
		}
		merged = append(merged, e)
	}
	return HolderWrote(&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"managedFields": merged}}})
}
