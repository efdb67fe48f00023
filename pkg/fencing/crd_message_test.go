package fencing_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/testenv"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// The CRD's rule on spec.epoch is written in a kubebuilder marker, which cannot name the Go constant
// ReasonOf matches: the generated CRD (what is installed) must carry fencingv1alpha1.StaleEpochMessage.
func TestCRDStaleEpochMessage(t *testing.T) {
	path := filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", "fencing.fencekit.io_fencedresources.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, v := range crd.Spec.Versions {
		epoch := v.Schema.OpenAPIV3Schema.Properties["spec"].Properties["epoch"]
		var found bool
		for _, r := range epoch.XValidations {
			if r.Rule != "self >= oldSelf" {
				continue
			}
			found = true
			if want := "'" + fencingv1alpha1.StaleEpochMessage + " "; !strings.HasPrefix(r.MessageExpression, want) {
				t.Errorf("%s, version %s: spec.epoch's rule %q has messageExpression %q, want it to start with %q (fencingv1alpha1.StaleEpochMessage, which fencing.ReasonOf matches)",
					path, v.Name, r.Rule, r.MessageExpression, want)
			}
		}
		if !found {
			t.Errorf("%s, version %s: spec.epoch has no rule self >= oldSelf", path, v.Name)
		}
	}
}

// A write below the stored epoch, refused by the CRD's own rule inside the apiserver (no webhook runs in
// this package's control plane), is read as a stale epoch by ReasonOf and IsStale.
func TestCRDRefusalIsStale(t *testing.T) {
	ns := env.Namespace(t)
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer", Epoch: 5},
	}
	if err := env.Client.Create(t.Context(), fr); err != nil {
		t.Fatal(err)
	}
	fr.Spec.Epoch = 4
	err := env.Client.Update(t.Context(), fr)
	if got := fencing.ReasonOf(err); got != fencing.ReasonStale || !fencing.IsStale(err) {
		t.Fatalf("update from epoch 5 to 4: ReasonOf(%v) = %q, want %q", err, got, fencing.ReasonStale)
	}
	if !strings.Contains(err.Error(), fencingv1alpha1.StaleEpochMessage+" 4: this FencedResource has already admitted epoch 5") {
		t.Errorf("the CRD's refusal %q does not name both epochs", err)
	}
}
