package fencing

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPreconditionedScaleWrites: a scale write names the resourceVersion its deletion check read, in every
// patch type, so the apiserver applies it only to the object that check saw; a caller's own, other
// resourceVersion is a conflict, not overwritten.
func TestPreconditionedScaleWrites(t *testing.T) {
	stored := []byte(`{"metadata":{"name":"app","resourceVersion":"12"},"spec":{"replicas":1}}`)
	for _, tc := range []struct {
		name  string
		patch client.Patch
		want  string // the resourceVersion the patched Scale names, "" for a conflict
	}{
		{"merge", client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":5}}`)), "7"},
		{"strategic merge", client.RawPatch(types.StrategicMergePatchType, []byte(`{"spec":{"replicas":5}}`)), "7"},
		{"apply", client.RawPatch(types.ApplyPatchType, []byte(`{"apiVersion":"autoscaling/v1","kind":"Scale","spec":{"replicas":5}}`)), "7"},
		{"JSON patch", client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/spec/replicas","value":5}]`)), "7"},
		{"merge naming the same", client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"7"},"spec":{"replicas":5}}`)), "7"},
		{"merge naming another", client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"resourceVersion":"6"},"spec":{"replicas":5}}`)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := preconditioned{Patch: tc.patch, rv: "7"}.Data(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "app"}})
			if tc.want == "" {
				if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `"app"`) {
					t.Fatalf("Data = %s, %v; want a conflict naming scale \"app\"", data, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var patched []byte
			if tc.patch.Type() == types.JSONPatchType {
				p, err := jsonpatch.DecodePatch(data)
				if err != nil {
					t.Fatal(err)
				}
				if patched, err = p.Apply(stored); err != nil {
					t.Fatal(err)
				}
			} else if patched, err = jsonpatch.MergePatch(stored, data); err != nil {
				t.Fatal(err)
			}
			var got struct {
				Metadata metav1.ObjectMeta      `json:"metadata"`
				Spec     struct{ Replicas int } `json:"spec"`
			}
			if err := json.Unmarshal(patched, &got); err != nil {
				t.Fatal(err)
			}
			if got.Metadata.ResourceVersion != tc.want || got.Spec.Replicas != 5 {
				t.Errorf("the patched Scale is at resourceVersion %q with %d replicas, want %q and 5 (patch %s)", got.Metadata.ResourceVersion, got.Spec.Replicas, tc.want, data)
			}
		})
	}
	var scale metav1.ObjectMeta
	if err := precondition(&scale, "7"); err != nil || scale.ResourceVersion != "7" {
		t.Errorf("an update's Scale without a resourceVersion: %v, %q; want it set to 7", err, scale.ResourceVersion)
	}
	scale.ResourceVersion = "6"
	if err := precondition(&scale, "7"); !apierrors.IsConflict(err) {
		t.Errorf("an update's Scale at resourceVersion 6 checked at 7: %v, want a conflict", err)
	}
}
