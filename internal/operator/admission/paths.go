package admission

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Path is a field of an object, as a list of map keys from the top: {"metadata", "labels", "app"}.
type Path []string

// String renders p as refusals name it: "spec.data.orders", "metadata.annotations[example.com/x]".
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case strings.ContainsAny(s, "./[]") || s == "":
			b.WriteString("[" + s + "]")
		case i > 0:
			b.WriteString("." + s)
		default:
			b.WriteString(s)
		}
	}
	return b.String()
}

// under reports whether p is prefix or below it.
func (p Path) under(prefix ...string) bool {
	return len(p) >= len(prefix) && slices.Equal(p[:len(prefix)], prefix)
}

// managedFieldsPath is left out of changedPaths: the rule reads it as ownership (managed.go).
var managedFieldsPath = Path{"metadata", "managedFields"}

// changedPaths lists the leaves that differ between old and updated (either may be nil), in key order: maps
// are compared key by key, anything else (strings, numbers, lists) as a whole. An absent value, null, an
// empty map and an empty list count as the same; "" and 0 do not (they are values). apiVersion and kind
// are not fields of the object, and metadata.managedFields is left to the ownership rule.
func changedPaths(old, updated map[string]any) []Path {
	var out []Path
	diffMaps(nil, old, updated, &out)
	return out
}

func diffMaps(at Path, old, updated map[string]any, out *[]Path) {
	for _, k := range unionKeys(old, updated) {
		if len(at) == 0 && (k == "apiVersion" || k == "kind") {
			continue
		}
		p := append(slices.Clip(at), k)
		if slices.Equal(p, managedFieldsPath) {
			continue
		}
		o, n := old[k], updated[k]
		om, oIsMap := o.(map[string]any)
		nm, nIsMap := n.(map[string]any)
		switch {
		case oIsMap && nIsMap, oIsMap && absent(n), nIsMap && absent(o):
			diffMaps(p, om, nm, out)
		case absent(o) && absent(n):
		case !reflect.DeepEqual(o, n):
			*out = append(*out, p)
		}
	}
}

// absent reports whether v is missing, null, an empty map or an empty list.
func absent(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
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
	slices.Sort(keys)
	return keys
}

// listPaths renders up to limit paths for a message, saying how many more there are.
func listPaths(ps []Path, limit int) string {
	var s []string
	for i, p := range ps {
		if i == limit {
			s = append(s, "and "+strconv.Itoa(len(ps)-limit)+" more")
			break
		}
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}
