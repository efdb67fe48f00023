package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func raw(t *testing.T, v any) *runtime.RawExtension {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return &runtime.RawExtension{Raw: b}
}

func bigObject(keys int) map[string]any {
	m := make(map[string]any, keys)
	for i := range keys {
		m[fmt.Sprintf("k%03d", i)] = i
	}
	return m
}

// TestSchema runs the FencedResource schema and its CEL rules through the real apiserver, with no webhook
// installed: these rejections come from the CRD alone.
func TestSchema(t *testing.T) {
	ns := env.Namespace(t)
	// valid is a FencedResource the schema accepts, with the changes made by change.
	valid := func(name string, change ...func(*fencingv1alpha1.FencedResource)) *fencingv1alpha1.FencedResource {
		fr := &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: fencingv1alpha1.FencedResourceSpec{
				LeaseName: "orders-writer",
				Epoch:     5,
				Data:      raw(t, map[string]any{"orders": []int{1, 2, 3}, "nested": map[string]any{"a": "b"}}),
			},
		}
		for _, c := range change {
			c(fr)
		}
		return fr
	}

	tests := map[string]struct {
		// create is the object to create; if update is set, create is created first and then updated.
		create *fencingv1alpha1.FencedResource
		update func(*fencingv1alpha1.FencedResource)
		// rawCreate, if set, is created as unstructured JSON instead (for shapes the Go type cannot express).
		rawCreate map[string]any
		// wantErr is the substring of the apiserver's message; empty means the write is admitted.
		wantErr []string
	}{
		"valid object is accepted": {
			create: valid("valid"),
		},
		"declaration with no data and no epoch is accepted": {
			create: &fencingv1alpha1.FencedResource{
				ObjectMeta: metav1.ObjectMeta{Name: "declared", Namespace: ns},
				Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer"},
			},
		},
		"equal epoch is accepted": {
			create: valid("equal"),
			update: func(fr *fencingv1alpha1.FencedResource) { fr.Spec.Data = raw(t, map[string]any{"v": 2}) },
		},
		"higher epoch is accepted": {
			create: valid("higher"),
			update: func(fr *fencingv1alpha1.FencedResource) { fr.Spec.Epoch = 6 },
		},
		"decreasing epoch is rejected": {
			create:  valid("decreasing"),
			update:  func(fr *fencingv1alpha1.FencedResource) { fr.Spec.Epoch = 4 },
			wantErr: []string{"spec.epoch", "stale epoch 4: this FencedResource has already admitted epoch 5"},
		},
		"epoch reset to zero by omission is rejected": {
			create:  valid("omitted"),
			update:  func(fr *fencingv1alpha1.FencedResource) { fr.Spec.Epoch = 0 },
			wantErr: []string{"stale epoch 0: this FencedResource has already admitted epoch 5"},
		},
		"negative epoch is rejected": {
			create:  valid("negative", func(fr *fencingv1alpha1.FencedResource) { fr.Spec.Epoch = -1 }),
			wantErr: []string{"spec.epoch", "should be greater than or equal to 0"},
		},
		"epoch at the bound 2^53-1 is accepted": {
			create: valid("at-max"),
			update: func(fr *fencingv1alpha1.FencedResource) { fr.Spec.Epoch = fencingv1alpha1.MaxEpoch },
		},
		"epoch above 2^53-1 is rejected": {
			create:  valid("above-max"),
			update:  func(fr *fencingv1alpha1.FencedResource) { fr.Spec.Epoch = fencingv1alpha1.MaxEpoch + 1 },
			wantErr: []string{"spec.epoch", "should be less than or equal to 9007199254740991"},
		},
		"missing leaseName is rejected": {
			rawCreate: map[string]any{"metadata": map[string]any{"name": "missing"}, "spec": map[string]any{"epoch": 1}},
			wantErr:   []string{"spec.leaseName", "Required value"},
		},
		"empty leaseName is rejected": {
			create:  valid("empty", func(fr *fencingv1alpha1.FencedResource) { fr.Spec.LeaseName = "" }),
			wantErr: []string{"spec.leaseName", "should be at least 1 chars long"},
		},
		"leaseName that is not DNS-1123 is rejected": {
			create:  valid("invalid-name", func(fr *fencingv1alpha1.FencedResource) { fr.Spec.LeaseName = "Orders_Writer" }),
			wantErr: []string{"spec.leaseName", "should match"},
		},
		"leaseName over 253 characters is rejected": {
			create:  valid("long-name", func(fr *fencingv1alpha1.FencedResource) { fr.Spec.LeaseName = strings.Repeat("a", 254) }),
			wantErr: []string{"spec.leaseName", "may not be more than 253 bytes"},
		},
		"leaseName change is rejected": {
			create:  valid("rebind"),
			update:  func(fr *fencingv1alpha1.FencedResource) { fr.Spec.LeaseName = "other-writer" },
			wantErr: []string{"spec.leaseName", "leaseName is immutable: create a new FencedResource to bind another Lease"},
		},
		"data that is not an object is rejected": {
			rawCreate: map[string]any{"metadata": map[string]any{"name": "array-data"}, "spec": map[string]any{"leaseName": "orders-writer", "data": []int{1, 2}}},
			wantErr:   []string{"spec.data", `must be of type object: "array"`},
		},
		"data that is a string is rejected": {
			rawCreate: map[string]any{"metadata": map[string]any{"name": "string-data"}, "spec": map[string]any{"leaseName": "orders-writer", "data": "x"}},
			wantErr:   []string{"spec.data", `must be of type object: "string"`},
		},
		"data over the key bound is rejected": {
			create: valid("too-many-keys", func(fr *fencingv1alpha1.FencedResource) {
				fr.Spec.Data = raw(t, bigObject(fencingv1alpha1.MaxDataKeys+1))
			}),
			wantErr: []string{"spec.data", "must have at most 256 items"},
		},
		"data at the key bound is accepted": {
			create: valid("max-keys", func(fr *fencingv1alpha1.FencedResource) {
				fr.Spec.Data = raw(t, bigObject(fencingv1alpha1.MaxDataKeys))
			}),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			var err error
			switch {
			case tc.rawCreate != nil:
				obj := map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource"}
				for k, v := range tc.rawCreate {
					obj[k] = v
				}
				obj["metadata"].(map[string]any)["namespace"] = ns
				u := &unstructured.Unstructured{Object: obj}
				err = env.Client.Create(ctx, u)
			case tc.update == nil:
				err = env.Client.Create(ctx, tc.create)
			default:
				if err := env.Client.Create(ctx, tc.create); err != nil {
					t.Fatalf("creating %s: %v", tc.create.Name, err)
				}
				before := tc.create.DeepCopy()
				tc.update(tc.create)
				err = env.Client.Update(ctx, tc.create)
				if len(tc.wantErr) > 0 {
					// Nothing of a rejected write may be stored.
					var stored fencingv1alpha1.FencedResource
					if gerr := env.Client.Get(ctx, client.ObjectKeyFromObject(before), &stored); gerr != nil {
						t.Fatal(gerr)
					}
					if stored.Spec.Epoch != before.Spec.Epoch || stored.Spec.LeaseName != before.Spec.LeaseName || string(stored.Spec.Data.Raw) != string(before.Spec.Data.Raw) {
						t.Errorf("rejected update changed the stored spec: before %+v, stored %+v", before.Spec, stored.Spec)
					}
				}
			}
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("want the write admitted, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want the write rejected with %q, it was admitted", tc.wantErr)
			}
			if !apierrors.IsInvalid(err) {
				t.Errorf("want a 422 Invalid error, got %T %v", err, err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err.Error(), want)
				}
			}
		})
	}
}

// TestSelectableLeaseName checks that FencedResources can be listed by the Lease they are bound to, which
// fence-on-acquire relies on.
func TestSelectableLeaseName(t *testing.T) {
	ns := env.Namespace(t)
	for i, lease := range []string{"a", "a", "b"} {
		fr := &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fr-%d", i), Namespace: ns},
			Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: lease},
		}
		if err := env.Client.Create(t.Context(), fr); err != nil {
			t.Fatal(err)
		}
	}
	var list fencingv1alpha1.FencedResourceList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(ns), client.MatchingFields{"spec.leaseName": "a"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fr := range list.Items {
		names = append(names, fr.Name)
	}
	if got, want := strings.Join(names, ","), "fr-0,fr-1"; got != want {
		t.Errorf("FencedResources bound to lease a: got %s, want %s", got, want)
	}
}
