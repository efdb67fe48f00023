package admission

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/fencekit/fencekit/pkg/elector"
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
func (e entry) epochManager() bool { return strings.HasPrefix(e.manager, elector.FieldManagerPrefix) }

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
//   - an epoch manager's entry (a holder's) may not gain anything, not even a free field;
//   - an added entry may not be an epoch manager's;
//   - an epoch manager's entry may not lose anything, not even a free field, but to the cluster's own
//     controllers (controller): what the holder wrote is the holder's, a finalizer it set (its cleanup) too.
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
			if a.epochManager() {
				changes = append(changes, ownershipChange{entry: a, why: "adds an entry for a fenced writer"})
			}
		}
		gained, lost := a.fields.Difference(b.fields), b.fields.Difference(a.fields)
		if a.epochManager() && !gained.Empty() {
			changes = append(changes, ownershipChange{entry: a, path: firstPath(gained), why: "gives a fenced writer's entry ownership of"})
		}
		outside(a, gained, "gives ownership of")
		outside(a, lost, "takes ownership of")
		if a.epochManager() && !lost.Empty() && !controller {
			changes = append(changes, ownershipChange{entry: a, path: firstPath(lost), why: "takes from a fenced writer's entry ownership of"})
		}
	}
	for id, b := range before {
		if _, kept := after[id]; !kept {
			outside(b, b.fields, "removes the entry that owns")
			if b.epochManager() && !b.fields.Empty() && !controller {
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

func firstPath(s *fieldpath.Set) Path {
	var first Path
	s.Iterate(func(p fieldpath.Path) {
		if first == nil {
			first = asPath(p)
		}
	})
	return first
}
