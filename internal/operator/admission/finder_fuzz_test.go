package admission

// The finder (free.go) against the search of each element (linearHas): the inputs where an index could
// answer otherwise (an empty key, key names that join alike, a finder reused across paths) and a fuzz test.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// linearHas is has without an index: each list searched element by element.
func linearHas(obj map[string]any, p fieldpath.Path) bool {
	return walk(obj, p, func(l []any, pe fieldpath.PathElement) int {
		return slices.IndexFunc(l, func(e any) bool { return matches(e, pe) })
	})
}

// attackDecode decodes doc (a JSON object with apiVersion and kind) both ways the admission webhook may
// see an object: encoding/json and the apimachinery's unstructured scheme.
func attackDecode(t testing.TB, doc string) []map[string]any {
	t.Helper()
	var plain map[string]any
	if err := json.Unmarshal([]byte(doc), &plain); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	typed, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(doc), nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return []map[string]any{plain, typed.(*unstructured.Unstructured).Object}
}

// attackPath parses the single path a fieldsV1 document names.
func attackPath(t testing.TB, fields string) fieldpath.Path {
	t.Helper()
	set := fieldpath.NewSet()
	if err := set.FromJSON(strings.NewReader(fields)); err != nil {
		t.Fatalf("%s: %v", fields, err)
	}
	var out []fieldpath.Path
	set.Leaves().Iterate(func(p fieldpath.Path) { out = append(out, p.Copy()) })
	if len(out) != 1 {
		t.Fatalf("%s: %d paths", fields, len(out))
	}
	return out[0]
}

// listDoc is an object whose r.l holds elems, padded with filler elements {"f":i} up to n.
func listDoc(n int, elems map[int]string) string {
	var l []string
	for i := range n {
		if e, ok := elems[i]; ok {
			l = append(l, e)
		} else {
			l = append(l, fmt.Sprintf(`{"f":%d}`, i))
		}
	}
	return `{"apiVersion":"v1","kind":"X","r":{"l":[` + strings.Join(l, ",") + `]}}`
}

// elemPath is the fieldsV1 of r.l's element named pe (a serialized path element), and then of rest.
func elemPath(pe, rest string) string {
	inner := map[string]any{}
	if rest != "" {
		inner[rest] = map[string]any{}
	}
	b := marshal(map[string]any{"f:r": map[string]any{"f:l": map[string]any{pe: inner}}})
	return string(b)
}

// agree checks that one finder of doc answers each path of steps, in order, as linearHas does.
func agree(t *testing.T, doc string, steps []string) {
	t.Helper()
	for di, obj := range attackDecode(t, doc) {
		in := newFinder(obj)
		for _, fields := range steps {
			p := attackPath(t, fields)
			want := linearHas(obj, p)
			if got := in.has(p); got != want {
				t.Errorf("decoder %d: finder.has(%s) = %v, the search of each element finds %v\n  object %s", di, p, got, want, doc)
			}
		}
	}
}

// An empty key, k:{}, names every map element (matches holds no field against it): the first map of the
// list, in a short list and a long one alike.
func TestFinderEmptyKey(t *testing.T) {
	for _, n := range []int{shortList, shortList + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			agree(t, listDoc(n, nil), []string{elemPath(`k:{}`, "")})
		})
	}
}

// A list is indexed once per list of key field names: the names a and b and the one name "a\x00b" are two
// indexes, whichever is looked up first. Sharing one would miss the elements that have "a\x00b" but not a
// and b, and, when the first element a path names is missed, find its field under a later one.
func TestFinderKeyNamesWithNUL(t *testing.T) {
	const ab, v = `a\u0000b`, `x\u0000sy` // a\x00b, and the value whose bucket is the one of {a:x, b:y}
	doc := listDoc(shortList+1, map[int]string{
		0:  `{"` + ab + `":"` + v + `"}`,
		1:  `{"a":"x","b":"y"}`,
		2:  `{"` + ab + `":"q"}`,
		16: `{"a":"x","b":"y","` + ab + `":"` + v + `","extra":1,"extra2":1}`,
	})
	byAB := func(rest string) string { return elemPath(`k:{"a":"x","b":"y"}`, rest) }
	byNUL := func(val, rest string) string { return elemPath(`k:{"`+ab+`":"`+val+`"}`, rest) }
	t.Run("false negative", func(t *testing.T) {
		agree(t, doc, []string{byAB(""), byNUL("q", "")})
	})
	t.Run("false positive, {a,b} first", func(t *testing.T) {
		agree(t, doc, []string{byAB("f:extra2"), byNUL(v, "f:extra")})
	})
	t.Run("false positive, a\\x00b first", func(t *testing.T) {
		agree(t, doc, []string{byNUL(v, "f:extra"), byAB("f:extra2")})
	})
}

// After the empty key k:{}, the key of the one field named "", k:{"":"x"}, still finds the map {"":"x"}.
func TestFinderEmptyNameAfterEmptyKey(t *testing.T) {
	doc := listDoc(shortList+1, map[int]string{5: `{"":"x"}`})
	agree(t, doc, []string{elemPath(`k:{}`, ""), elemPath(`k:{"":"x"}`, "")})
}

// Through ownershipChanges: an entry gains two fields, each under the first element its key names, which
// lacks it (a later element of the same key has it): both are refused as fields the object does not have.
func TestFinderThroughOwnershipChanges(t *testing.T) {
	const ab, v = "a\x00b", "x\x00sy"
	l := []any{map[string]any{ab: v}, map[string]any{"a": "x", "b": "y"}}
	for i := 2; i < shortList; i++ {
		l = append(l, map[string]any{"f": int64(i)})
	}
	l = append(l, map[string]any{"a": "x", "b": "y", ab: v, "extra": int64(1), "extra2": int64(1)})
	keyAB := marshal(map[string]any{"a": "x", "b": "y"})
	keyNUL := marshal(map[string]any{ab: v})
	fields := map[string]any{"f:r": map[string]any{"f:l": map[string]any{
		"k:" + string(keyAB):  map[string]any{"f:extra2": map[string]any{}},
		"k:" + string(keyNUL): map[string]any{"f:extra": map[string]any{}},
	}}}
	obj := func(managed ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "X",
			"metadata": map[string]any{"namespace": "ns", "name": "x", "managedFields": managed},
			"r":        map[string]any{"l": l},
		}}
	}
	old, updated := obj(), obj(managedEntry("someone", "Update", fields))
	// Round-trip through JSON, as the webhook receives it.
	b := marshal(updated.Object)
	for _, o := range attackDecode(t, string(b)) {
		updated = &unstructured.Unstructured{Object: o}
		set := fieldpath.NewSet()
		fb := marshal(fields)
		if err := set.FromJSON(strings.NewReader(string(fb))); err != nil {
			t.Fatal(err)
		}
		want := 0
		set.Leaves().Iterate(func(p fieldpath.Path) {
			if !linearHas(updated.Object, p) {
				want++
			}
		})
		changes, err := ownershipChanges(old, updated, func(Path) bool { return true }, false)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, c := range changes {
			if strings.Contains(c.why, "does not have") {
				got++
			}
		}
		if got != want {
			t.Errorf("ownershipChanges refuses %d fields the object does not have, the search of each element %d: %v", got, want, changes)
		}
	}
}

// FuzzHasX compares the finder, shared by every path of a managedFields set (in the set's order and in
// reverse), and a fresh finder per path, with the search of each element, on objects whose list r.l
// (and the lists r.l[*].l nested in it) the fuzzer builds from values meant to collide in buckets: numbers
// as int64 and float64, -0, 2^53±1, 1e21, strings that look like other buckets' renderings, "\x00", null,
// booleans, maps and lists, duplicates, missing key fields, empty keys and key names holding "\x00".
func FuzzFinder(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, many times over, 0123456789"))
	f.Add([]byte{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 200, 100, 50, 25, 12, 6, 3, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &attackGen{b: data}
		doc, fields := g.build()
		var plain map[string]any
		if err := json.Unmarshal([]byte(doc), &plain); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		objs := []map[string]any{plain}
		if typed, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(doc), nil, nil); err == nil {
			objs = append(objs, typed.(*unstructured.Unstructured).Object)
		}
		set := fieldpath.NewSet()
		if err := set.FromJSON(strings.NewReader(fields)); err != nil {
			return
		}
		var paths []fieldpath.Path
		set.Iterate(func(p fieldpath.Path) { paths = append(paths, p.Copy()) })
		for di, obj := range objs {
			shared, reversed := newFinder(obj), newFinder(obj)
			got := make([]bool, len(paths))
			for i := len(paths) - 1; i >= 0; i-- {
				got[i] = reversed.has(paths[i])
			}
			for i, p := range paths {
				want := linearHas(obj, p)
				if a, b, c := shared.has(p), got[i], newFinder(obj).has(p); a != want || b != want || c != want {
					t.Fatalf("decoder %d: has(%s): finder in order %v, in reverse %v, fresh %v; the search of each element %v\n object %s\n fields %s",
						di, p, a, b, c, want, doc, fields)
				}
			}
		}
	})
}

// attackGen builds an object and a fieldsV1 set from fuzz bytes.
type attackGen struct {
	b []byte
	i int
}

func (g *attackGen) n(k int) int {
	if g.i >= len(g.b) {
		return 0
	}
	v := int(g.b[g.i]) % k
	g.i++
	return v
}

var attackValues = []string{
	`0`, `-0.0`, `0.0`, `1`, `1.0`, `1.5`, `-1`, `1e0`, `10`, `1e1`,
	`9007199254740992`, `9007199254740993`, `9007199254740992.0`, `9007199254740994`,
	`1e21`, `1000000000000000000000`, `1e+21`, `9223372036854775807`, `9223372036854775808`,
	`-9223372036854775808`, `18446744073709551615`, `1e308`, `5e-324`, `0.1`, `0.30000000000000004`,
	`null`, `true`, `false`, `""`, `"x"`, `"1"`, `"#1"`, `"s"`, `"sx"`, `"n"`, `"*"`, `"btrue"`, `"true"`,
	`"#0"`, `"x\u0000sy"`, `"\u0000"`, `"x\u0000"`, `"\ufffd"`, `"é"`,
	`{}`, `[]`, `{"a":1}`, `{"a":1.0}`, `{"a":null}`, `[1]`, `[1.0]`, `[null]`, `[[]]`, `{"":{}}`,
}

func (g *attackGen) names() []string {
	return []string{"a", "b", "", "c", `a\u0000b`, `\u0000`}
}

func (g *attackGen) value() string { return attackValues[g.n(len(attackValues))] }

// element is one list element: as JSON text, and its key fields (name to JSON text) when a map.
type attackElem struct {
	text   string
	fields [][2]string
}

func (g *attackGen) list(depth int) []attackElem {
	lengths := []int{17, 16, 18, 0, 1, 15, 20, 24, 40, 33}
	n := lengths[g.n(len(lengths))]
	names := g.names()
	var out []attackElem
	for j := range n {
		switch g.n(5) {
		case 1:
			v := g.value()
			out = append(out, attackElem{text: v})
		case 2:
			if j > 0 {
				out = append(out, out[g.n(j)])
				continue
			}
			fallthrough
		default:
			var e attackElem
			var parts []string
			for _, name := range names {
				if g.n(3) != 0 {
					v := g.value()
					e.fields = append(e.fields, [2]string{name, v})
					parts = append(parts, `"`+name+`":`+v)
				}
			}
			if g.n(2) == 0 {
				parts = append(parts, `"x":1`)
			}
			if depth == 0 && g.n(3) == 0 {
				var sub []string
				for _, s := range g.list(1) {
					sub = append(sub, s.text)
				}
				parts = append(parts, `"l":[`+strings.Join(sub, ",")+`]`)
			}
			e.text = "{" + strings.Join(parts, ",") + "}"
			out = append(out, e)
		}
	}
	return out
}

// element returns a serialized path element naming an element of l (or none).
func (g *attackGen) element(l []attackElem) string {
	names := g.names()
	switch g.n(5) {
	case 0: // the key of an element, some of its fields
		if len(l) > 0 {
			e := l[g.n(len(l))]
			var parts []string
			for _, f := range e.fields {
				if g.n(4) != 0 {
					parts = append(parts, `"`+f[0]+`":`+f[1])
				}
			}
			return "k:{" + strings.Join(parts, ",") + "}"
		}
		fallthrough
	case 1: // a random key, names may repeat
		var parts []string
		for k := 1 + g.n(3); k > 0; k-- {
			parts = append(parts, `"`+names[g.n(len(names))]+`":`+g.value())
		}
		return "k:{" + strings.Join(parts, ",") + "}"
	case 2: // the value of an element
		if len(l) > 0 {
			return "v:" + l[g.n(len(l))].text
		}
		fallthrough
	case 3:
		return "v:" + g.value()
	default:
		return fmt.Sprintf("i:%d", g.n(45)-2)
	}
}

func (g *attackGen) build() (doc, fields string) {
	l := g.list(0)
	var texts []string
	for _, e := range l {
		texts = append(texts, e.text)
	}
	doc = `{"apiVersion":"v1","kind":"X","r":{"l":[` + strings.Join(texts, ",") + `]}}`
	tree := map[string]any{}
	for k := 1 + g.n(8); k > 0; k-- {
		node := map[string]any{}
		pe := g.element(l)
		var sub map[string]any
		switch g.n(4) {
		case 0:
			node["f:x"] = map[string]any{}
		case 1:
			// An element of a nested list: of the element pe names, if it has one (from the fuzzer's
			// choice of another element's list otherwise: the finder's cache must not mix them up).
			var nested []attackElem
			for _, e := range l {
				if strings.Contains(e.text, `"l":[`) {
					var v map[string]any
					if json.Unmarshal([]byte(e.text), &v) == nil {
						for _, x := range v["l"].([]any) {
							b := marshal(x)
							ne := attackElem{text: string(b)}
							if m, ok := x.(map[string]any); ok {
								for name, fv := range m {
									if name != "x" && name != "l" {
										fb := marshal(fv)
										nb := marshal(name)
										ne.fields = append(ne.fields, [2]string{string(nb[1 : len(nb)-1]), string(fb)})
									}
								}
								slices.SortFunc(ne.fields, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
							}
							nested = append(nested, ne)
						}
					}
					if g.n(2) == 0 {
						break
					}
				}
			}
			sub = map[string]any{g.element(nested): map[string]any{}}
			node["f:l"] = sub
		}
		tree[pe] = mergeAttack(tree[pe], node)
	}
	b := marshal(map[string]any{"f:r": map[string]any{"f:l": tree}})
	return doc, string(b)
}

func mergeAttack(a any, b map[string]any) map[string]any {
	m, _ := a.(map[string]any)
	if m == nil {
		return b
	}
	for k, v := range b {
		if old, ok := m[k].(map[string]any); ok {
			m[k] = mergeAttack(old, v.(map[string]any))
		} else {
			m[k] = v
		}
	}
	return m
}

// marshal is json.Marshal of what the tests build (maps, strings, numbers), which cannot fail.
func marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
