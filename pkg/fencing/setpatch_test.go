package fencing

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
)

// TestSetOps applies Set's JSON patch to stored FencedResources and checks what it leaves: exactly the new
// data (nulls left out), the token's epoch and writer, no deletion marker, other annotations kept; and
// that it does not apply to a resource bound to another Lease, nor (the first form) to one without
// annotations, which the second form is for.
func TestSetOps(t *testing.T) {
	tok := elector.Token{Epoch: 7, Holder: "worker-a", Lease: types.NamespacedName{Namespace: "ns", Name: "orders-writer"}}
	data := map[string]any{"a": 1, "n": map[string]any{"x": 1, "gone": nil}, "drop": nil}
	const wantData = `{"a":1,"n":{"x":1}}`
	const wantAnn = `"fencing.fencekit.io/writer":"worker-a"`
	tests := map[string]struct {
		stored string
		want   string // "" when the patch must not apply
	}{
		"data replaced, marker removed, other annotations kept": {
			stored: `{"metadata":{"annotations":{"keep":"me","fencing.fencekit.io/delete-at-epoch":"6","fencing.fencekit.io/writer":"old"}},"spec":{"leaseName":"orders-writer","epoch":6,"data":{"a":0,"old":true,"n":{"y":2}}}}`,
			want:   `{"metadata":{"annotations":{"keep":"me",` + wantAnn + `}},"spec":{"leaseName":"orders-writer","epoch":7,"data":` + wantData + `}}`,
		},
		"no data and no marker yet": {
			stored: `{"metadata":{"annotations":{"keep":"me"}},"spec":{"leaseName":"orders-writer"}}`,
			want:   `{"metadata":{"annotations":{"keep":"me",` + wantAnn + `}},"spec":{"leaseName":"orders-writer","epoch":7,"data":` + wantData + `}}`,
		},
		"bound to another lease": {
			stored: `{"metadata":{"annotations":{}},"spec":{"leaseName":"other","epoch":6}}`,
		},
		"no annotations: the patch does not apply (Set gives the writer annotation first)": {
			stored: `{"metadata":{},"spec":{"leaseName":"orders-writer"}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(setOps(tok, data))
			if err != nil {
				t.Fatal(err)
			}
			patch, err := jsonpatch.DecodePatch(raw)
			if err != nil {
				t.Fatal(err)
			}
			got, err := patch.Apply([]byte(tc.stored))
			if tc.want == "" {
				if err == nil {
					t.Fatalf("the patch applied to %s: %s", tc.stored, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("the patch did not apply to %s: %v", tc.stored, err)
			}
			var gotV, wantV any
			if err := json.Unmarshal(got, &gotV); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.want), &wantV); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantV, gotV); diff != "" {
				t.Errorf("patched resource (-want +got):\n%s", diff)
			}
		})
	}
}
