package fencing_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// The CRD's rule on spec.epoch is written in a kubebuilder marker, which cannot name the Go constant
// ReasonOf matches: the generated CRD (what is installed) must carry fencingv1alpha1.StaleEpochMessage.
func TestCRDStaleEpochMessage(t *testing.T) {
	path := filepath.Join("..", "..", "config", "crd", "bases", "fencing.fencekit.io_fencedresources.yaml")
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
