package fencing

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
)

var holdToken = elector.Token{Epoch: 7, Holder: "worker-a", Lease: types.NamespacedName{Namespace: "ns", Name: "l"}}

// applyConflict is the apiserver's answer to an apply whose fields another field manager owns.
func applyConflict() error {
	return apierrors.NewApplyConflict([]metav1.StatusCause{{Type: metav1.CauseTypeFieldManagerConflict,
		Message: `conflict with "gitops": .metadata.labels.team`, Field: ".metadata.labels.team"}},
		"Apply failed with 1 conflict: conflict with \"gitops\": .metadata.labels.team")
}

func rvConflict() error {
	return apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "cm",
		errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// TestArmsHold: only a lost resourceVersion compare-and-swap of a write that stores something arms the hold.
func TestArmsHold(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		cas, dryRun bool
		want        bool
	}{
		{"lost compare-and-swap", rvConflict(), true, false, true},
		{"dry run", rvConflict(), true, true, false},
		{"no resourceVersion named", rvConflict(), false, false, false},
		{"field-manager conflict", applyConflict(), true, false, false},
		{"not a conflict", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "cm", errors.New("no")), true, false, false},
		{"success", nil, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := armsHold(tc.err, tc.cas, tc.dryRun); got != tc.want {
				t.Errorf("armsHold(%v, cas %v, dryRun %v) = %v, want %v", tc.err, tc.cas, tc.dryRun, got, tc.want)
			}
		})
	}
}

func TestNamesResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		pt   types.PatchType
		data string
		want bool
	}{
		{types.MergePatchType, `{"metadata":{"resourceVersion":"12"},"data":{"a":"1"}}`, true},
		{types.StrategicMergePatchType, `{"metadata":{"resourceVersion":"12"}}`, true},
		{types.MergePatchType, `{"data":{"a":"1"}}`, false},
		{types.MergePatchType, `{"metadata":{"resourceVersion":null}}`, false},
		{types.JSONPatchType, `[{"op":"replace","path":"/metadata/resourceVersion","value":"12"}]`, true},
		{types.JSONPatchType, `[{"op":"test","path":"/metadata/resourceVersion","value":"12"}]`, false},
		{types.ApplyPatchType, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"12"}}`, false},
	} {
		if got := namesResourceVersion(tc.pt, []byte(tc.data)); got != tc.want {
			t.Errorf("namesResourceVersion(%s, %s) = %v, want %v", tc.pt, tc.data, got, tc.want)
		}
	}
}

// TestEpochPatchRemovesTheMarker: fence-on-acquire's raise (and every other epochPatch) leaves no deletion
// marker of an earlier epoch, nor, for the raise, a hold; other annotations stay.
func TestEpochPatchRemovesTheMarker(t *testing.T) {
	stored := `{"metadata":{"annotations":{"keep":"me","fencing.fencekit.io/delete-at-epoch":"6","fencing.fencekit.io/hold-at-epoch":"6","fencing.fencekit.io/writer":"old"}},"spec":{"leaseName":"l","epoch":6}}`
	p := epochPatch(holdToken, map[string]any{fencingv1alpha1.HoldAtEpochAnnotation: nil})
	data, err := p.Data(nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonpatch.MergePatch([]byte(stored), data)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Metadata metav1.ObjectMeta                  `json:"metadata"`
		Spec     fencingv1alpha1.FencedResourceSpec `json:"spec"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"keep": "me", fencingv1alpha1.WriterAnnotation: "worker-a"}
	if len(got.Metadata.Annotations) != len(want) || got.Metadata.Annotations["keep"] != "me" ||
		got.Metadata.Annotations[fencingv1alpha1.WriterAnnotation] != "worker-a" || got.Spec.Epoch != 7 {
		t.Errorf("raised resource: annotations %v, epoch %d; want annotations %v, epoch 7 (patch %s)", got.Metadata.Annotations, got.Spec.Epoch, want, data)
	}
}

// splitData tells a resource a holder wrote (it holds data) from one a raise alone brought above epoch 0,
// whatever its epoch.
func TestSplitData(t *testing.T) {
	fr := func(name string, epoch int64, data string) fencingv1alpha1.FencedResource {
		r := fencingv1alpha1.FencedResource{}
		r.Name, r.Spec.Epoch = name, epoch
		if data != "" {
			r.Spec.Data = &runtime.RawExtension{Raw: []byte(data)}
		}
		return r
	}
	written, raisedOnly := splitData([]fencingv1alpha1.FencedResource{
		fr("written", 3, `{"v":1}`), fr("emptied", 3, `{}`), fr("raised", 3, ""), fr("null", 3, "null"),
	})
	var w, r []string
	for _, x := range written {
		w = append(w, x.Name)
	}
	for _, x := range raisedOnly {
		r = append(r, x.Name)
	}
	if !slices.Equal(w, []string{"written", "emptied"}) || !slices.Equal(r, []string{"raised", "null"}) {
		t.Errorf("splitData: written %v, raised only %v; want [written emptied] and [raised null]", w, r)
	}
}
