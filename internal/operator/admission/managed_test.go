package admission

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// withManaged is ConfigMap ns/app whose managedFields are the given entries.
func withManaged(entries ...map[string]any) *unstructured.Unstructured {
	list := make([]any, len(entries))
	for i, e := range entries {
		list[i] = e
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "ns", "name": "app", "managedFields": list},
	}}
}

func managedEntry(manager, operation string, fields map[string]any) map[string]any {
	return map[string]any{"manager": manager, "operation": operation, "apiVersion": "v1",
		"fieldsType": "FieldsV1", "fieldsV1": fields}
}

// A write that moves data.b from the holder's Update entry into its Apply entry makes two refused
// changes (the Apply entry gains data.b; the emptied Update entry reads as owning the map data). The
// refusal names the field, data.b, on every run, whatever the order of Go's map iteration.
func TestOwnershipChangesNameTheMostSpecificField(t *testing.T) {
	holder := "fencing.fencekit.io/epoch=1"
	old := withManaged(
		managedEntry(holder, "Apply", map[string]any{"f:data": map[string]any{"f:a": map[string]any{}}}),
		managedEntry(holder, "Update", map[string]any{"f:data": map[string]any{"f:b": map[string]any{}}}),
	)
	moved := withManaged(
		managedEntry(holder, "Apply", map[string]any{"f:data": map[string]any{"f:a": map[string]any{}, "f:b": map[string]any{}}}),
		managedEntry(holder, "Update", map[string]any{"f:data": map[string]any{}}),
	)
	for range 50 {
		changes, err := ownershipChanges(old, moved, func(Path) bool { return false }, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) == 0 {
			t.Fatal("moving ownership of data.b between the holder's entries is not a change")
		}
		if got := changes[0].path.String(); got != "data.b" {
			t.Fatalf("the first change names %q (%s in the entry of %s), want data.b", got, changes[0].why, changes[0].entry)
		}
	}
}

// has finds a field by the path a managedFields entry names it with, whatever form the object's numbers
// were decoded to, and finds no field the object does not hold.
func TestHas(t *testing.T) {
	doc := `{"metadata":{"finalizers":["example.com/a"],"labels":{"app":"x"}},
		"spec":{"containers":[{"name":"c","ports":[{"containerPort":80,"protocol":"TCP"}]}]},
		"status":{"conditions":[{"type":"Ready","status":"True"}]}}`
	var plain map[string]any
	if err := json.Unmarshal([]byte(doc), &plain); err != nil {
		t.Fatal(err)
	}
	typed, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(`{"apiVersion":"v1","kind":"Pod",`+doc[1:]), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range []map[string]any{plain, typed.(*unstructured.Unstructured).Object} {
		for fields, want := range map[string]bool{
			`{"f:metadata":{"f:labels":{"f:app":{}}}}`:                                                                            true,
			`{"f:metadata":{"f:labels":{"f:team":{}}}}`:                                                                           false,
			`{"f:metadata":{"f:finalizers":{"v:\"example.com/a\"":{}}}}`:                                                          true,
			`{"f:metadata":{"f:finalizers":{"v:\"example.com/b\"":{}}}}`:                                                          false,
			`{"f:metadata":{"f:finalizers":{"v:0":{}}}}`:                                                                          false,
			`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:status":{}}}}}`:                                            true,
			`{"f:status":{"f:conditions":{"k:{\"type\":\"c00001\"}":{"f:status":{}}}}}`:                                           false,
			`{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{"f:ports":{"k:{\"containerPort\":80,\"protocol\":\"TCP\"}":{}}}}}}`: true,
			`{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{"f:ports":{"k:{\"containerPort\":81,\"protocol\":\"TCP\"}":{}}}}}}`: false,
			`{"f:spec":{"f:containers":{"i:0":{"f:name":{}}}}}`:                                                                   true,
			`{"f:spec":{"f:containers":{"i:1":{"f:name":{}}}}}`:                                                                   false,
		} {
			set := fieldpath.NewSet()
			if err := set.FromJSON(strings.NewReader(fields)); err != nil {
				t.Fatalf("%s: %v", fields, err)
			}
			set.Leaves().Iterate(func(p fieldpath.Path) {
				if got := has(obj, p); got != want {
					t.Errorf("has(%s) = %v, want %v", p, got, want)
				}
			})
		}
	}
}

// An entry that gains ownership of the orphan or foregroundDeletion finalizer, even one the object already
// has, keeps it through the holder's apply that drops it: refused. Any other finalizer is free to co-own.
func TestCoOwningADeletionFinalizer(t *testing.T) {
	holder := "fencing.fencekit.io/epoch=1"
	owns := func(finalizers ...string) map[string]any {
		f := map[string]any{}
		for _, v := range finalizers {
			f[`v:"`+v+`"`] = map[string]any{}
		}
		return map[string]any{"f:metadata": map[string]any{"f:finalizers": f}}
	}
	withFinalizers := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		u.SetFinalizers([]string{"orphan", "app.example/cleanup"})
		return u
	}
	old := withFinalizers(withManaged(managedEntry(holder, "Apply", owns("orphan", "app.example/cleanup"))))
	free := func(p Path) bool { return p.under("metadata", "finalizers") }
	for name, tc := range map[string]struct {
		editor []string
		want   bool
	}{
		"an editor co-owns orphan":                {editor: []string{"orphan"}, want: true},
		"an editor co-owns the cleanup finalizer": {editor: []string{"app.example/cleanup"}},
	} {
		updated := withFinalizers(withManaged(managedEntry(holder, "Apply", owns("orphan", "app.example/cleanup")), managedEntry("editor", "Apply", owns(tc.editor...))))
		changes, err := ownershipChanges(old, updated, free, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(changes) > 0; got != tc.want {
			t.Errorf("%s: changes %v, want refused %v", name, changes, tc.want)
		}
	}
}

// A merge into ancient-changes after a raise: the creating epoch manager's entry owns the annotations map
// as a leaf (the raise's entry took the record key it held), and in the bucket the map holds that key. The
// merge is the apiserver's, not the writer's: a free finalizer written under an eleventh field manager
// changes no ownership.
func TestMergeAfterARaiseIsNotTheWriters(t *testing.T) {
	record := "f:fencing.fencekit.io/object-epoch"
	created := managedEntry("fencing.fencekit.io/epoch=1", "Update", map[string]any{
		"f:metadata": map[string]any{"f:annotations": map[string]any{}}, "f:data": map[string]any{"f:v": map[string]any{}}})
	raised := managedEntry("fencing.fencekit.io/epoch=2", "Update", map[string]any{
		"f:metadata": map[string]any{"f:annotations": map[string]any{record: map[string]any{}}}})
	before := []map[string]any{created, raised}
	for i := range 9 {
		before = append(before, finalizerEntry(i))
	}
	bucket := managedEntry(AncientChanges, "Update", map[string]any{
		"f:metadata": map[string]any{"f:annotations": map[string]any{record: map[string]any{}}}, "f:data": map[string]any{"f:v": map[string]any{}}})
	after := []map[string]any{bucket}
	for i := range 10 {
		after = append(after, finalizerEntry(i))
	}
	object := func(entries []map[string]any, finalizers int) *unstructured.Unstructured {
		u := withManaged(entries...)
		u.Object["data"] = map[string]any{"v": "a"}
		u.SetAnnotations(map[string]string{"fencing.fencekit.io/object-epoch": "2"})
		var f []string
		for i := range finalizers {
			f = append(f, "example.com/f"+string(rune('0'+i)))
		}
		u.SetFinalizers(f)
		return u
	}
	free := func(p Path) bool { return p.under("metadata", "finalizers") }
	changes, err := ownershipChanges(object(before, 9), object(after, 10), free, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) > 0 {
		t.Fatalf("the apiserver's merge of the holder's entries is judged as the writer's: %s %v in the entry of %s", changes[0].why, changes[0].path, changes[0].entry)
	}
}

// TestMergeOfTheWritersOwnEntry: an object with ten Update entries (the bucket and nine others, dated to the
// same second); a write adds an eleventh entry, the writer's, and the apiserver merges it into the bucket
// (it sorts first after the bucket). What the bucket gains is the writer's: a free field is admitted, a
// fenced one refused, as if the writer's entry had stayed.
func TestMergeOfTheWritersOwnEntry(t *testing.T) {
	bucketFields := map[string]any{"f:data": map[string]any{"f:v": map[string]any{}}}
	before := []map[string]any{managedEntry(AncientChanges, "Update", bucketFields)}
	for i := range 9 {
		before = append(before, finalizerEntry(i))
	}
	object := func(entries []map[string]any, labels map[string]string) *unstructured.Unstructured {
		u := withManaged(entries...)
		u.Object["data"] = map[string]any{"v": "a", "w": "b"}
		u.SetLabels(labels)
		var f []string
		for i := range 9 {
			f = append(f, "example.com/f"+string(rune('0'+i)))
		}
		u.SetFinalizers(f)
		return u
	}
	free := func(p Path) bool { return p.under("metadata", "finalizers") || p.under("metadata", "labels") }
	for _, c := range []struct {
		name   string
		gained map[string]any
		want   Path // nil: admitted
	}{
		{"a label", map[string]any{"f:metadata": map[string]any{"f:labels": map[string]any{"f:team": map[string]any{}}}}, nil},
		{"data", map[string]any{"f:data": map[string]any{"f:w": map[string]any{}}}, Path{"data", "w"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			merged := map[string]any{}
			for k, v := range bucketFields {
				merged[k] = v
			}
			for k, v := range c.gained {
				if m, ok := merged[k].(map[string]any); ok {
					m = maps.Clone(m)
					maps.Copy(m, v.(map[string]any))
					v = m
				}
				merged[k] = v
			}
			after := append([]map[string]any{managedEntry(AncientChanges, "Update", merged)}, before[1:]...)
			changes, err := ownershipChanges(object(before, nil), object(after, map[string]string{"team": "a"}), free, false)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == nil && len(changes) > 0:
				t.Fatalf("the writer's own entry merged into the bucket is judged as a gain of the holder's: %s %v in the entry of %s", changes[0].why, changes[0].path, changes[0].entry)
			case c.want != nil && (len(changes) == 0 || !slices.Equal(changes[0].path, c.want)):
				t.Fatalf("the writer's ownership of %v, merged into the bucket, is not refused: %v", c.want, changes)
			}
		})
	}
}

// TestForgedMergedWriterEntryIsJudged: a write that sends managedFields itself, with an entry named as the
// one undoMerges gives the writer's merged fields, has that entry judged: it cannot stand in for it.
func TestForgedMergedWriterEntryIsJudged(t *testing.T) {
	bucketFields := map[string]any{"f:data": map[string]any{"f:keep": map[string]any{}}}
	before := []map[string]any{managedEntry(AncientChanges, "Update", bucketFields)}
	for i := range 9 {
		before = append(before, finalizerEntry(i))
	}
	grown := managedEntry(AncientChanges, "Update", map[string]any{"f:data": map[string]any{"f:keep": map[string]any{}},
		"f:metadata": map[string]any{"f:finalizers": map[string]any{`v:"example.com/f9"`: map[string]any{}}}})
	forged := managedEntry(mergedWriter, "Update", map[string]any{"f:data": map[string]any{"f:drop": map[string]any{}}})
	after := append([]map[string]any{grown, forged}, before[2:]...)
	object := func(entries []map[string]any, n int) *unstructured.Unstructured {
		u := withManaged(entries...)
		u.Object["data"] = map[string]any{"keep": "1", "drop": "1"}
		var f []string
		for i := range n {
			f = append(f, "example.com/f"+string(rune('0'+i)))
		}
		u.SetFinalizers(f)
		return u
	}
	free := func(p Path) bool { return p.under("metadata", "finalizers") }
	changes, err := ownershipChanges(object(before, 9), object(after, 10), free, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(changes, func(c ownershipChange) bool { return slices.Equal(c.path, Path{"data", "drop"}) }) {
		t.Fatalf("a forged entry named %q gains data.drop unjudged: %v", mergedWriter, changes)
	}
}

// finalizerEntry is the Update entry of manager tool-i (i < 10) that owns finalizer example.com/fi, as a
// namespace editor's free finalizer write leaves it.
func finalizerEntry(i int) map[string]any {
	return managedEntry("tool-"+string(rune('0'+i)), "Update", map[string]any{
		"f:metadata": map[string]any{"f:finalizers": map[string]any{`v:"example.com/f` + string(rune('0'+i)) + `"`: map[string]any{}}}})
}

// TestMergeMakesNoObjectWritten: an object no holder wrote, with ten Update entries (an editor's, which owns
// data written before a policy covered the object, and nine finalizers'); a write without the token adds an
// eleventh entry and the apiserver merges the editor's into ancient-changes, whose content
// fencing.HolderWrote counts as a holder's. The write is refused, naming the merged entry; the same merge on
// an object a holder wrote changes nothing fencekit reads, and is left to the other checks.
func TestMergeMakesNoObjectWritten(t *testing.T) {
	data := map[string]any{"f:data": map[string]any{"f:v": map[string]any{}}}
	object := func(entries []map[string]any) *unstructured.Unstructured {
		u := withManaged(entries...)
		u.Object["data"] = map[string]any{"v": "a"}
		return u
	}
	for _, c := range []struct {
		name  string
		first map[string]any // the oldest entry, merged by the write
		want  []string
	}{
		{"an editor's entry", managedEntry("editor", "Update", data), []string{`"editor"`}},
		{"a holder's entry", managedEntry("fencing.fencekit.io/epoch=1", "Update", data), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := []map[string]any{c.first}
			after := []map[string]any{managedEntry(AncientChanges, "Update", data)}
			for i := range 9 {
				before = append(before, finalizerEntry(i))
				after = append(after, finalizerEntry(i))
			}
			after = append(after, finalizerEntry(9))
			r := &Request{Class: Object, Operation: Update, Old: object(before), New: object(after)}
			r.Complete()
			if got := mergedIntoWritten(r); !slices.Equal(got, c.want) {
				t.Errorf("mergedIntoWritten = %q, want %q", got, c.want)
			}
		})
	}
}

// TestNoFreeWriteFillsTheTokensRoom: a write without the token that adds an Update entry to an object no
// holder wrote may not leave it where the holder's next write (its raise's entry) passes the apiserver's
// ten Update entries and merges content written before coverage into ancient-changes; an object without
// such content, one a holder wrote, one whose token entry is already there, and a write that adds no entry
// are left to the other checks.
func TestNoFreeWriteFillsTheTokensRoom(t *testing.T) {
	data := map[string]any{"f:data": map[string]any{"f:v": map[string]any{}}}
	record := map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{"f:fencing.fencekit.io/epoch": map[string]any{}}}}
	finalizers := func(n int) []map[string]any {
		var es []map[string]any
		for i := range n {
			es = append(es, finalizerEntry(i))
		}
		return es
	}
	for _, c := range []struct {
		name          string
		before, after []map[string]any
		want          bool
	}{
		{"the tenth entry, an editor's content among them",
			append([]map[string]any{managedEntry("editor", "Update", data)}, finalizers(8)...),
			append([]map[string]any{managedEntry("editor", "Update", data)}, finalizers(9)...), true},
		{"the ninth entry",
			append([]map[string]any{managedEntry("editor", "Update", data)}, finalizers(7)...),
			append([]map[string]any{managedEntry("editor", "Update", data)}, finalizers(8)...), false},
		{"the tenth entry, no content among them", finalizers(9), finalizers(10), false},
		{"the tenth entry, the token's already among them",
			append([]map[string]any{managedEntry("editor", "Update", data), managedEntry("fencing.fencekit.io/epoch=1", "Update", record)}, finalizers(7)...),
			append([]map[string]any{managedEntry("editor", "Update", data), managedEntry("fencing.fencekit.io/epoch=1", "Update", record)}, finalizers(8)...), false},
		{"the tenth entry on an object a holder wrote",
			append([]map[string]any{managedEntry("fencing.fencekit.io/epoch=1", "Update", data)}, finalizers(8)...),
			append([]map[string]any{managedEntry("fencing.fencekit.io/epoch=1", "Update", data)}, finalizers(9)...), false},
		{"no entry added at ten",
			append([]map[string]any{managedEntry("editor", "Update", data)}, finalizers(9)...),
			append([]map[string]any{managedEntry("editor", "Update", data)}, finalizers(9)...), false},
		// The first raise created the annotations map, and its entry keeps owning it after the next raise
		// took the epoch record: that raise adds its entry.
		{"the tenth entry, the first raise's entry owns the annotations map",
			append([]map[string]any{managedEntry("editor", "Update", data), managedEntry("fencing.fencekit.io/epoch=1", "Update", map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{".": map[string]any{}, "f:fencing.fencekit.io/epoch": map[string]any{}}}})}, finalizers(7)...),
			append([]map[string]any{managedEntry("editor", "Update", data), managedEntry("fencing.fencekit.io/epoch=1", "Update", map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{".": map[string]any{}, "f:fencing.fencekit.io/epoch": map[string]any{}}}})}, finalizers(8)...), true},
		{"an Apply entry added at ten",
			append([]map[string]any{managedEntry("editor", "Update", data)}, finalizers(9)...),
			append([]map[string]any{managedEntry("editor", "Update", data), managedEntry("gitops", "Apply", data)}, finalizers(9)...), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Request{Class: Object, Operation: Update, Kind: "ConfigMap", Namespace: "ns", Name: "app",
				Old: withManaged(c.before...), New: withManaged(c.after...)}
			r.Complete()
			if n, got := fillsTheTokensRoom(r); got != c.want {
				t.Errorf("fillsTheTokensRoom = %d, %v, want %v", n, got, c.want)
			}
			// A kubelet's first status write adds its entry, under a field manager it cannot choose.
			r.User = User{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
			if _, got := fillsTheTokensRoom(r); got {
				t.Errorf("fillsTheTokensRoom refuses a kubelet's write")
			}
		})
	}
}
