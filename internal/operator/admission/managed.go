package admission

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// entry is one managedFields entry: who owns which fields.
type entry struct {
	manager, operation, subresource, apiVersion string
	fields                                      *fieldpath.Set
}

// id names the entry as the apiserver tells entries apart.
func (e entry) id() string {
	return strings.Join([]string{e.manager, e.operation, e.subresource, e.apiVersion}, "\x00")
}

func (e entry) String() string {
	s := fmt.Sprintf("manager %q (%s", e.manager, e.operation)
	if e.subresource != "" {
		s += ", subresource " + e.subresource
	}
	return s + ")"
}

// epochManager reports whether the entry is a fenced writer's: its manager is a token.
func (e entry) epochManager() bool { return strings.HasPrefix(e.manager, protocol.FieldManagerPrefix) }

// AncientChanges is the manager the apiserver merges an object's oldest Update entries into once it has
// more than ten of them (k8s.io/apiserver's fieldmanager, "ancient-changes"): one per API version.
const AncientChanges = "ancient-changes"

// ancient reports whether the entry is the apiserver's bucket of merged Update entries.
func (e entry) ancient() bool {
	return e.manager == AncientChanges && e.operation == "Update" && e.subresource == ""
}

// holders reports whether the entry may own what a holder wrote: an epoch manager's, or the bucket the
// apiserver merges old entries into, which receives a holder's entries once ten others are newer (a
// holder's writes at eleven epochs are enough). The rule keeps both as it keeps the holder's.
func (e entry) holders() bool { return e.epochManager() || e.ancient() }

// entries reads u's metadata.managedFields. An entry that cannot be read is an error: the rule cannot
// say what it owns, so it refuses (fail closed).
func entries(u *unstructured.Unstructured) (map[string]entry, error) {
	out := map[string]entry{}
	if u == nil {
		return out, nil
	}
	list, _, err := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
	if err != nil {
		return nil, err
	}
	for i, raw := range list {
		m, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("managedFields[%d] is not an object", i)
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		e := entry{manager: str("manager"), operation: str("operation"), subresource: str("subresource"),
			apiVersion: str("apiVersion"), fields: fieldpath.NewSet()}
		if f, ok := m["fieldsV1"]; ok && f != nil {
			b, err := json.Marshal(f)
			if err != nil {
				return nil, err
			}
			set := fieldpath.NewSet()
			if err := set.FromJSON(bytes.NewReader(b)); err != nil {
				return nil, fmt.Errorf("managedFields[%d] (manager %q): %w", i, e.manager, err)
			}
			// The fields, not the maps that hold them: owning "spec" as a map that holds leaseName is
			// owning leaseName.
			e.fields = set.Leaves()
		}
		out[e.id()] = e
	}
	return out, nil
}

// maxUpdateEntries is how many Update entries the apiserver keeps before it merges the oldest into its
// "ancient-changes" buckets (k8s.io/apiserver's fieldmanager, DefaultMaxUpdateManagers).
const maxUpdateEntries = 10

// mergedWriter names the entry undoMerges gives back what the apiserver merged of the writer's own entry;
// its operation, mergedOperation, is one no request can send (the apiserver accepts Apply and Update
// only), so that no entry a write sends can stand in its place.
const (
	mergedWriter    = "(this write's own entry, merged by the apiserver into " + AncientChanges + ")"
	mergedOperation = "Update, merged"
)

// undoMerges returns after as it was before the apiserver merged entries into its "ancient-changes"
// buckets. The apiserver merges after admission sees nothing of the writer: on any write that adds an
// Update entry to an object that has ten, its oldest entries (by the second they were written, then by
// name) until ten are left, the writer's own new entry included when it sorts first. So:
//   - an Update entry of before that after lacks, and whose fields the bucket of its API version holds, is
//     put back, and the bucket keeps only what it held before and gained otherwise;
//   - when the write brought the object to the cap, what the bucket gained otherwise is the writer's own
//     entry's, and is given back to an entry of the writer's (mergedWriter), judged as any entry a write
//     adds.
//
// Whatever such a merge moves stays with a holder's entry (holders), so the write is judged on what the
// writer changed; an entry merged whose fields the bucket does not hold is judged as removed. (A writer
// whose entry sorts before the bucket itself makes the apiserver drop the bucket, and what it owned with
// it: such a write is judged as removing the bucket.)
func undoMerges(before, after map[string]entry) map[string]entry {
	var out map[string]entry
	capped := updates(after) == maxUpdateEntries && updates(before) >= maxUpdateEntries
	for id, a := range after {
		if !a.ancient() {
			continue
		}
		merged := fieldpath.NewSet()
		for bid, b := range before {
			if _, kept := after[bid]; kept || b.ancient() || b.operation != "Update" || b.apiVersion != a.apiVersion || b.fields.Empty() || !holds(a.fields, b.fields) {
				continue
			}
			if out == nil {
				out = maps.Clone(after)
			}
			out[bid] = b
			merged = merged.Union(b.fields)
		}
		held := fieldpath.NewSet()
		if b, ok := before[id]; ok {
			held = b.fields
		}
		writers := fieldpath.NewSet()
		if capped {
			writers = a.fields.Difference(held).Difference(merged)
		}
		if merged.Empty() && writers.Empty() {
			continue
		}
		if out == nil {
			out = maps.Clone(after)
		}
		a.fields = a.fields.Difference(merged.Difference(held)).Difference(writers)
		if _, existed := before[id]; !existed && a.fields.Empty() {
			delete(out, id)
		} else {
			out[id] = a
		}
		if !writers.Empty() {
			w := entry{manager: mergedWriter, operation: mergedOperation, apiVersion: a.apiVersion, fields: writers}
			out[w.id()] = w
		}
	}
	if out == nil {
		return after
	}
	return out
}

// updates counts the Update entries.
func updates(es map[string]entry) int {
	n := 0
	for _, e := range es {
		if e.operation == "Update" {
			n++
		}
	}
	return n
}

// holds reports whether the bucket's fields hold every field of b: as a field, or as a map that holds
// others. An entry that owned a map as a leaf (an empty "f:annotations" left to the creating entry once a
// raise took the key it held) is merged into a bucket where the map holds keys of other entries, and is
// no longer a leaf there.
func holds(bucket, b *fieldpath.Set) bool {
	inner := fieldpath.NewSet()
	bucket.Iterate(func(p fieldpath.Path) {
		for i := 1; i < len(p); i++ {
			inner.Insert(p[:i].Copy())
		}
	})
	ok := true
	b.Iterate(func(p fieldpath.Path) {
		if ok && !bucket.Has(p) && !inner.Has(p) {
			ok = false
		}
	})
	return ok
}

// asPath is a field path as the allowlist reads it: its field names, up to the first list element (a
// finalizer, an owner reference), which stands for the whole list.
func asPath(p fieldpath.Path) Path {
	out := make(Path, 0, len(p))
	for _, pe := range p {
		if pe.FieldName == nil {
			break
		}
		out = append(out, *pe.FieldName)
	}
	return out
}

// ownershipChange is a change of managedFields that a write without the token may not make.
type ownershipChange struct {
	entry entry
	path  Path
	why   string
}

// ownershipChanges checks the managedFields of a write without the token: ownership may move only
// within the paths free says the write may change. In particular:
//   - no entry may gain or lose a field outside them (the holder's next server-side apply prunes a field
//     only its own Apply entry owns: moving ownership of data away from another manager deletes data);
//   - a holder's entry (an epoch manager's, or the apiserver's "ancient-changes" bucket that receives the
//     oldest: holders) may not gain anything, not even a free field;
//   - an added entry may not be a holder's;
//   - no entry may gain a field the object does not have: the apiserver keeps what a write sends in
//     managedFields, and every later write of the object, a raise too, works through every field listed;
//   - a holder's entry may not lose anything, not even a free field, but to the cluster's own
//     controllers (controller): what the holder wrote is the holder's, a finalizer it set (its cleanup) too;
//   - no entry may gain ownership of the finalizer orphan or foregroundDeletion, even one the object
//     already has: a co-owner keeps it through the holder's apply that drops it, and it decides what the
//     holder's delete does with the dependents (I4).
//
// The apiserver's own merges into "ancient-changes" are undone first (undoMerges): they move ownership
// between a holder's entries, whoever's write set them off.
//
// How much the entries hold is bounded with the rest of the object (MaxFreeObjectBytes).
func ownershipChanges(old, updated *unstructured.Unstructured, free func(Path) bool, controller bool) (changes []ownershipChange, err error) {
	before, err := entries(old)
	if err != nil {
		return nil, fmt.Errorf("reading the stored object's managedFields: %w", err)
	}
	after, err := entries(updated)
	if err != nil {
		return nil, fmt.Errorf("reading the written object's managedFields: %w", err)
	}
	after = undoMerges(before, after)
	outside := func(e entry, s *fieldpath.Set, why string) {
		s.Iterate(func(p fieldpath.Path) {
			if ap := asPath(p); len(ap) > 0 && !free(ap) {
				changes = append(changes, ownershipChange{entry: e, path: ap, why: why})
			}
		})
	}
	for id, a := range after {
		b, existed := before[id]
		if !existed {
			b = entry{fields: fieldpath.NewSet()}
			if a.holders() {
				changes = append(changes, ownershipChange{entry: a, why: "adds an entry for a fenced writer"})
			}
		}
		gained, lost := a.fields.Difference(b.fields), b.fields.Difference(a.fields)
		if a.holders() && !gained.Empty() {
			changes = append(changes, ownershipChange{entry: a, path: firstPath(gained), why: "gives a fenced writer's entry ownership of"})
		}
		outside(a, gained, "gives ownership of")
		gained.Iterate(func(p fieldpath.Path) {
			if updated != nil && !has(updated.Object, p) {
				changes = append(changes, ownershipChange{entry: a, path: asPath(p), why: "gives ownership of a field the object does not have, under"})
			}
			if f := deletionFinalizer(p); f != "" {
				changes = append(changes, ownershipChange{entry: a, path: Path{"metadata", "finalizers", f},
					why: "gives ownership of a finalizer that decides what a delete does with the dependents, which the holder's next apply could then not remove, under"})
			}
		})
		outside(a, lost, "takes ownership of")
		if a.holders() && !lost.Empty() && !controller {
			changes = append(changes, ownershipChange{entry: a, path: firstPath(lost), why: "takes from a fenced writer's entry ownership of"})
		}
	}
	for id, b := range before {
		if _, kept := after[id]; !kept {
			outside(b, b.fields, "removes the entry that owns")
			if b.holders() && !b.fields.Empty() && !controller {
				changes = append(changes, ownershipChange{entry: b, path: firstPath(b.fields), why: "removes the fenced writer's entry that owns"})
			}
		}
	}
	// The most specific change first, in a fixed order: the refusal names the same field every time.
	slices.SortStableFunc(changes, func(x, y ownershipChange) int {
		if c := cmp.Compare(len(y.path), len(x.path)); c != 0 {
			return c
		}
		if c := cmp.Compare(x.path.String(), y.path.String()); c != 0 {
			return c
		}
		return cmp.Compare(x.entry.id(), y.entry.id())
	})
	return changes, nil
}

// deletionFinalizer returns the deletion finalizer (orphan, foregroundDeletion) that managedFields path p
// names, "" if it names none.
func deletionFinalizer(p fieldpath.Path) string {
	if len(p) != 3 || p[0].FieldName == nil || *p[0].FieldName != "metadata" || p[1].FieldName == nil ||
		*p[1].FieldName != "finalizers" || p[2].Value == nil {
		return ""
	}
	if v := *p[2].Value; v.IsString() && (v.AsString() == orphanFinalizer || v.AsString() == foregroundFinalizer) {
		return v.AsString()
	}
	return ""
}

// has reports whether obj holds the field at p: a map's key, a list's element by its key fields (k:),
// its value (v:) or its index (i:).
func has(obj map[string]any, p fieldpath.Path) bool {
	var cur any = obj
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return false
			}
			if cur, ok = m[*pe.FieldName]; !ok {
				return false
			}
		case pe.Index != nil:
			l, ok := cur.([]any)
			if !ok || *pe.Index < 0 || *pe.Index >= len(l) {
				return false
			}
			cur = l[*pe.Index]
		default:
			l, _ := cur.([]any)
			i := slices.IndexFunc(l, func(e any) bool { return matches(e, pe) })
			if i < 0 {
				return false
			}
			cur = l[i]
		}
	}
	return true
}

// matches reports whether list element e is the one pe names by its key fields or its value.
func matches(e any, pe fieldpath.PathElement) bool {
	if pe.Value != nil {
		return value.Equals(value.NewValueInterface(e), *pe.Value)
	}
	m, ok := e.(map[string]any)
	if !ok || pe.Key == nil {
		return false
	}
	for _, f := range *pe.Key {
		v, ok := m[f.Name]
		if !ok || !value.Equals(value.NewValueInterface(v), f.Value) {
			return false
		}
	}
	return true
}

func firstPath(s *fieldpath.Set) Path {
	var first Path
	s.Iterate(func(p fieldpath.Path) {
		if first == nil {
			first = asPath(p)
		}
	})
	return first
}
