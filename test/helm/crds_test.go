package helm_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The rule chart B (the upgrade) adds to spec.leaseName of the FencedResource CRD, and a name it refuses.
const (
	upgradedMessage = "refused by the rule of chart 0.1.1-upgrade"
	upgradedRefuses = "refused-by-the-upgrade"
)

// TestTemplateCRDs: the chart renders config/crd/bases' CRDs unchanged but for the release's labels and, with
// crds.keep (the default), Helm's keep policy; crds.enabled=false renders none.
func TestTemplateCRDs(t *testing.T) {
	want := configCRDs(t)
	for _, tc := range []struct {
		set  string
		keep bool
		none bool
	}{{"crds.enabled=true", true, false}, {"crds.keep=false", false, false}, {"crds.enabled=false", false, true}} {
		got := objects(t, ns, "--set", tc.set).ofKind("CustomResourceDefinition")
		if tc.none {
			if len(got) != 0 {
				t.Errorf("%s renders %v", tc.set, got.names())
			}
			continue
		}
		if len(got) != len(want) {
			t.Fatalf("%s renders %v, want the %d CRDs of config/crd/bases", tc.set, got.names(), len(want))
		}
		for i, w := range want {
			g := as[apiextensionsv1.CustomResourceDefinition](t, got[i])
			if diff := cmp.Diff(w.Spec, g.Spec); g.Name != w.Name || diff != "" {
				t.Errorf("%s: rendered CRD %s differs from config/crd/bases' %s (-want +got):\n%s", tc.set, g.Name, w.Name, diff)
			}
			if (g.Annotations["helm.sh/resource-policy"] == "keep") != tc.keep {
				t.Errorf("%s: CRD %s has annotations %v, want helm.sh/resource-policy keep: %v", tc.set, g.Name, g.Annotations, tc.keep)
			}
			if g.Annotations["controller-gen.kubebuilder.io/version"] != w.Annotations["controller-gen.kubebuilder.io/version"] {
				t.Errorf("%s: CRD %s lost controller-gen's version annotation: %v", tc.set, g.Name, g.Annotations)
			}
		}
	}
}

// configCRDs are the CRDs of config/crd/bases (controller-gen's output), in the order of their file names.
func configCRDs(t *testing.T) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(raw, crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, crd)
	}
	return out
}

// TestHelmCRDUpgrade runs helm against the local apiserver with the chart's CRDs as templates: a release
// adopts CRDs installed before it (here by the control plane, as by an older chart's crds/ directory or
// kubectl) once they carry Helm's ownership metadata; `helm upgrade` to a chart whose CRD has another CEL rule
// brings that rule to the apiserver, which then refuses what it refuses; a second release that renders the CRDs
// is refused (one release owns them); and `helm uninstall` leaves the CRDs (crds.keep). The CRDs are the
// control plane's own, so the test puts them back as config/crd/bases has them when it ends.
func TestHelmCRDUpgrade(t *testing.T) {
	namespace := env.Namespace(t)
	kc := kubeconfig(t, identity{})
	const release = "crds"
	base := []string{"--namespace", namespace, "--kubeconfig", kc}
	crdNames := restoreCRDsAtEnd(t)

	// CRDs that exist without Helm's ownership metadata are not Helm's to take.
	if out, err := helm(t, append([]string{"install", release, chartDir}, base...)...); err == nil {
		uninstall(t, release, namespace, kc)
		t.Fatalf("helm install over CRDs without Helm's ownership metadata succeeded:\n%s", out)
	} else if !strings.Contains(err.Error(), "cannot be imported into the current release") {
		t.Fatalf("helm install over CRDs without Helm's ownership metadata: %v, want Helm's ownership refusal", err)
	}
	// The chart README's adoption: label and annotate them for the release.
	for _, name := range crdNames {
		crd := getCRD(t, t.Context(), name)
		metav1.SetMetaDataLabel(&crd.ObjectMeta, "app.kubernetes.io/managed-by", "Helm")
		metav1.SetMetaDataAnnotation(&crd.ObjectMeta, "meta.helm.sh/release-name", release)
		metav1.SetMetaDataAnnotation(&crd.ObjectMeta, "meta.helm.sh/release-namespace", namespace)
		updateCRD(t, t.Context(), crd)
	}

	if out, err := helm(t, append([]string{"install", release, chartDir}, base...)...); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			uninstall(t, release, namespace, kc)
		}
	})
	const frCRD = "fencedresources.fencing.fencekit.io"
	crd := getCRD(t, t.Context(), frCRD)
	if crd.Annotations["helm.sh/resource-policy"] != "keep" || crd.Labels["app.kubernetes.io/instance"] != release {
		t.Errorf("after helm install, CRD %s has labels %v and annotations %v: want release %s's, with helm.sh/resource-policy keep", frCRD, crd.Labels, crd.Annotations, release)
	}
	if slices.Contains(leaseNameRules(t, crd), upgradedMessage) {
		t.Fatalf("CRD %s has chart B's rule before the upgrade", frCRD)
	}
	if err := createRefusable(context.Background(), namespace); err != nil && strings.Contains(err.Error(), upgradedMessage) {
		t.Fatalf("before the upgrade a FencedResource for Lease %s is refused by chart B's rule: %v", upgradedRefuses, err)
	}

	chartB := upgradedChart(t)
	if out, err := helm(t, append([]string{"upgrade", release, chartB, "--reuse-values"}, base...)...); err != nil {
		t.Fatalf("helm upgrade to a chart with another CEL rule: %v\n%s", err, out)
	}
	crd = getCRD(t, t.Context(), frCRD)
	if !slices.Contains(leaseNameRules(t, crd), upgradedMessage) {
		t.Errorf("after helm upgrade, CRD %s's spec.leaseName rules are %q: the upgrade did not reach the CRD", frCRD, leaseNameRules(t, crd))
	}
	if got := crd.Labels["helm.sh/chart"]; got != "fencekit-0.1.1-upgrade" {
		t.Errorf("after helm upgrade, CRD %s is labelled helm.sh/chart=%s, want fencekit-0.1.1-upgrade", frCRD, got)
	}
	// The apiserver applies a CRD's new schema a moment after the update: poll a dry run.
	var last error
	testenv.Eventually(t, "the apiserver to enforce the upgraded CRD's rule", func() (bool, string) {
		last = createRefusable(t.Context(), namespace)
		return apierrors.IsInvalid(last) && strings.Contains(last.Error(), upgradedMessage), "last error: " + testenv.ErrString(last)
	})

	// The CRDs have one owner: a second release that renders them is refused.
	other := env.Namespace(t)
	if out, err := helm(t, "install", "second", chartDir, "--namespace", other, "--kubeconfig", kc); err == nil {
		uninstall(t, "second", other, kc)
		t.Errorf("a second release rendering the CRDs was installed over release %s's:\n%s", release, out)
	} else if !strings.Contains(err.Error(), "cannot be imported into the current release") {
		t.Errorf("a second release rendering the CRDs: %v, want Helm's ownership refusal", err)
	}

	if out, err := helm(t, append([]string{"uninstall", release, "--wait=false"}, base...)...); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	uninstalled = true
	for _, name := range crdNames {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := getCRDErr(t.Context(), name, crd); err != nil {
			t.Errorf("helm uninstall with crds.keep deleted CRD %s (and every object of it): %v", name, err)
		} else if crd.DeletionTimestamp != nil {
			t.Errorf("helm uninstall with crds.keep is deleting CRD %s", name)
		}
	}
}

// upgradedChart is a copy of the chart at version 0.1.1-upgrade whose FencedResource CRD has one more CEL
// rule on spec.leaseName, refusing upgradedRefuses.
func upgradedChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fencekit")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	edit := func(file, old, updated string) {
		t.Helper()
		path := filepath.Join(dir, file)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), old) {
			t.Fatalf("%s has no %q to change for the upgrade", file, old)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(raw), old, updated, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("Chart.yaml", "\nversion: 0.1.0\n", "\nversion: 0.1.1-upgrade\n")
	// The first x-kubernetes-validations after the leaseName property are leaseName's (controller-gen's
	// indentation: the rules' list items sit at the keyword's indentation).
	crdFile := filepath.Join("files", "crds", "fencing.fencekit.io_fencedresources.yaml")
	raw, err := os.ReadFile(filepath.Join(dir, crdFile))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	at := strings.Index(s, "\n              leaseName:\n")
	const rules = "                x-kubernetes-validations:\n"
	next := strings.Index(s[max(at, 0):], rules)
	if at < 0 || next < 0 {
		t.Fatalf("%s: no x-kubernetes-validations under spec.leaseName", crdFile)
	}
	cut := at + next + len(rules)
	s = s[:cut] + "                - message: " + upgradedMessage + "\n                  rule: self != '" + upgradedRefuses + "'\n" + s[cut:]
	if err := os.WriteFile(filepath.Join(dir, crdFile), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// createRefusable is a dry-run create of a FencedResource bound to the Lease upgradedRefuses. CRD schema
// validation (with its CEL rules) runs before the admission webhooks, so chart B's rule refuses it before any
// webhook is called.
func createRefusable(ctx context.Context, namespace string) error {
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Name: "upgrade", Namespace: namespace},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: upgradedRefuses},
	}
	return env.Client.Create(ctx, fr, client.DryRunAll)
}

// leaseNameRules are the messages of the CEL rules on spec.leaseName of the FencedResource CRD's version.
func leaseNameRules(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) []string {
	t.Helper()
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Schema == nil {
		t.Fatalf("CRD %s: want one version with a schema, got %d versions", crd.Name, len(crd.Spec.Versions))
	}
	var out []string
	for _, r := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["leaseName"].XValidations {
		out = append(out, r.Message)
	}
	return out
}

// restoreCRDsAtEnd returns the names of the CRDs in config/crd/bases, and, when the test ends, puts each back
// as config/crd/bases has it (spec, no Helm labels or annotations), waiting until the apiserver no longer
// enforces chart B's rule: the control plane's CRDs serve the package's other tests.
func restoreCRDsAtEnd(t *testing.T) []string {
	t.Helper()
	want := configCRDs(t)
	var names []string
	for _, crd := range want {
		names = append(names, crd.Name)
	}
	namespace := env.Namespace(t) // for the dry runs below: the test's context is gone in its cleanup
	t.Cleanup(func() {
		ctx := context.Background()
		for _, w := range want {
			crd := getCRD(t, ctx, w.Name)
			crd.Spec = w.Spec
			crd.Labels = w.Labels
			crd.Annotations = w.Annotations
			updateCRD(t, ctx, crd)
		}
		testenv.Eventually(t, "the apiserver to enforce config/crd/bases' CRD again", func() (bool, string) {
			err := createRefusable(ctx, namespace)
			return err == nil || !strings.Contains(err.Error(), upgradedMessage), "last error: " + testenv.ErrString(err)
		})
	})
	return names
}

// The test scheme has no apiextensions types: CRDs are read and written as unstructured and converted.
func getCRDErr(ctx context.Context, name string, crd *apiextensionsv1.CustomResourceDefinition) error {
	u := crdObject()
	if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd)
}

func getCRD(t *testing.T, ctx context.Context, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := getCRDErr(ctx, name, crd); err != nil {
		t.Fatalf("getting CRD %s: %v", name, err)
	}
	return crd
}

func updateCRD(t *testing.T, ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		t.Fatal(err)
	}
	u := crdObject()
	u.Object = obj
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	if err := env.Client.Update(ctx, u); err != nil {
		t.Fatalf("updating CRD %s: %v", crd.Name, err)
	}
}
