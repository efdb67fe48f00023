package webhook

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// TestMayTouchFencedFields checks that the webhook's cheap pre-check never lets a write that touches the
// fenced fields skip the Lease read, and that it agrees with fencing.TouchesFencedFields except where the
// data differs only in its encoding.
func TestMayTouchFencedFields(t *testing.T) {
	fr := func(epoch int64, writer, data string) *fencingv1alpha1.FencedResource {
		r := &fencingv1alpha1.FencedResource{Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "l", Epoch: epoch}}
		if writer != "" {
			r.Annotations = map[string]string{fencingv1alpha1.WriterAnnotation: writer}
		}
		if data != "-" {
			r.Spec.Data = &runtime.RawExtension{Raw: []byte(data)}
		}
		return r
	}
	owned := func(r *fencingv1alpha1.FencedResource) *fencingv1alpha1.FencedResource {
		r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: "00000000-0000-0000-0000-000000000002"}}
		return r
	}
	marked := func(r *fencingv1alpha1.FencedResource) *fencingv1alpha1.FencedResource {
		if r.Annotations == nil {
			r.Annotations = map[string]string{}
		}
		r.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation] = "2"
		return r
	}
	tests := map[string]struct {
		old, new *fencingv1alpha1.FencedResource
		want     bool
	}{
		"create, declaration only":         {nil, fr(0, "", "-"), false},
		"create with data":                 {nil, fr(0, "", `{"a":1}`), true},
		"create with epoch":                {nil, fr(2, "", "-"), true},
		"labels only, no data":             {fr(0, "", "-"), fr(0, "", "-"), false},
		"no data, null and empty":          {fr(0, "", "null"), fr(0, "", ""), false},
		"same data":                        {fr(2, "w", `{"a":1}`), fr(2, "w", `{"a":1}`), false},
		"data changed":                     {fr(2, "w", `{"a":1}`), fr(2, "w", `{"a":2}`), true},
		"data added":                       {fr(2, "w", "-"), fr(2, "w", `{"a":1}`), true},
		"data removed":                     {fr(2, "w", `{"a":1}`), fr(2, "w", "null"), true},
		"epoch raised":                     {fr(2, "w", `{"a":1}`), fr(3, "w", `{"a":1}`), true},
		"writer changed":                   {fr(2, "w", `{"a":1}`), fr(2, "v", `{"a":1}`), true},
		"same bytes, not JSON":             {fr(2, "w", `{"a":`), fr(2, "w", `{"a":`), true},
		"same data, other encoding (over)": {fr(2, "w", `{"a":1,"b":2}`), fr(2, "w", `{"b":2,"a":1}`), true},
		"big integer off by one":           {fr(2, "w", `{"n":9007199254740993}`), fr(2, "w", `{"n":9007199254740992}`), true},
		"owner reference added":            {fr(2, "w", `{"a":1}`), owned(fr(2, "w", `{"a":1}`)), true},
		"owner reference removed":          {owned(fr(2, "w", `{"a":1}`)), fr(2, "w", `{"a":1}`), true},
		"same owner references":            {owned(fr(2, "w", `{"a":1}`)), owned(fr(2, "w", `{"a":1}`)), false},
		"deletion marker set":              {fr(2, "w", `{"a":1}`), marked(fr(2, "w", `{"a":1}`)), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := mayTouchFencedFields(tc.old, tc.new)
			if got != tc.want {
				t.Errorf("mayTouchFencedFields = %v, want %v", got, tc.want)
			}
			if exact := fencing.TouchesFencedFields(tc.old, tc.new); exact && !got {
				t.Errorf("TouchesFencedFields = true but mayTouchFencedFields = false: the Lease would not be read")
			}
		})
	}
}
