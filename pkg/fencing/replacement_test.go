package fencing

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
)

// TestReplacement applies the merge patch that replacement builds and checks that it yields exactly the new
// data, whatever the old data was.
func TestReplacement(t *testing.T) {
	tests := map[string]struct{ old, new string }{
		"no old data":          {`null`, `{"a":1}`},
		"key removed":          {`{"a":1,"b":2}`, `{"a":1}`},
		"nested key removed":   {`{"a":{"x":1,"y":2}}`, `{"a":{"x":1}}`},
		"object becomes value": {`{"a":{"x":1}}`, `{"a":[1,2]}`},
		"value becomes object": {`{"a":"s"}`, `{"a":{"x":null}}`},
		"everything removed":   {`{"a":1,"b":{"c":2}}`, `{}`},
		"arrays replaced":      {`{"a":[1,2,3]}`, `{"a":[4]}`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var old any
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.old), &old); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.new), &want); err != nil {
				t.Fatal(err)
			}
			patch, _ := json.Marshal(replacement(old, want))
			doc := []byte(tc.old)
			if tc.old == "null" {
				doc = []byte(`{}`)
			}
			merged, err := jsonpatch.MergePatch(doc, patch)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(merged, &got); err != nil {
				t.Fatal(err)
			}
			// A merge patch cannot store an explicit null: the "value becomes object" case drops x.
			if name == "value becomes object" {
				want = map[string]any{"a": map[string]any{}}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("merge-patched data (-want +got):\n%s", diff)
			}
		})
	}
}
