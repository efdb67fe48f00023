package helm_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

const fieldOwner = "fencekit-helm-test"

// TestApplyToAPIServer renders the chart with default values and with each toggle, and applies every object
// (CRDs included) to the real local apiserver with server-side apply: the apiserver accepts them all, with its
// full validation (RBAC objects, the webhook configuration, the admission policy's CEL, the Deployment, the PDB,
// the NetworkPolicy). cert-manager and the Prometheus Operator are not installed, so their kinds (Issuer,
// Certificate, ServiceMonitor) are applied against stub CRDs that accept any fields: that proves the objects
// are well-formed Kubernetes objects, not that cert-manager's or Prometheus' schemas accept them (the template
// tests check their fields).
func TestApplyToAPIServer(t *testing.T) {
	installStubCRDs(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"cert-manager", []string{"--set", "certManager.enabled=true"}},
		{"everything on", []string{"--set", "serviceMonitor.enabled=true,networkPolicy.enabled=true,replicaCount=3,webhook.excludeNamespaces={team-a}",
			"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			namespace := env.Namespace(t)
			release := "apply"
			out, err := helm(t, append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, tc.args...)...)
			if err != nil {
				t.Fatalf("helm template: %v", err)
			}
			objs := parse(t, out)
			if len(objs.ofKind("CustomResourceDefinition")) == 0 {
				t.Fatal("the chart rendered no CRD")
			}
			for _, u := range objs {
				if isHook(u) {
					continue // the helm test hook: TestHelmTestHook runs it
				}
				apply(t, u)
				if u.GetNamespace() == "" && u.GetKind() != "CustomResourceDefinition" {
					// Cluster-scoped objects outlive the namespace; the webhook configuration in particular would
					// send FencedResource writes of the other tests to a Service with no pods.
					t.Cleanup(func() {
						if err := env.Client.Delete(context.Background(), u.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
							t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
						}
					})
				}
			}
			// What the apiserver stored is what the chart rendered, for the object that matters most.
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "apply-fencekit-validating-webhook"}, vwc); err != nil {
				t.Fatal(err)
			}
			if w := vwc.Webhooks[0]; *w.FailurePolicy != admissionregistrationv1.Fail || w.ClientConfig.Service.Namespace != namespace {
				t.Errorf("stored webhook: failurePolicy %v, service %+v", *w.FailurePolicy, w.ClientConfig.Service)
			}
			// The webhook skips the release namespace; the policy refuses FencedResources there, so that none
			// is ever written unchecked. A policy takes effect a moment after it is created: poll a dry run.
			var last error
			err = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				fr := &fencingv1alpha1.FencedResource{
					ObjectMeta: metav1.ObjectMeta{Name: "unchecked", Namespace: namespace},
					Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "l"},
				}
				last = env.Client.Create(ctx, fr, client.DryRunAll)
				return apierrors.IsForbidden(last), nil
			})
			if err != nil || !strings.Contains(last.Error(), "FencedResources and FencingPolicies cannot be created or updated in namespaces that fencekit's admission webhook does not check: "+namespace+", kube-system") {
				t.Errorf("creating a FencedResource in the release namespace: %v, want the fencekit-unchecked-namespaces refusal", last)
			}
		})
	}
}

// apply server-side applies one object, retrying while a just-created CRD is not served yet.
func apply(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		last = env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()), client.FieldOwner(fieldOwner), client.ForceOwnership)
		if last == nil {
			return true, nil
		}
		if meta.IsNoMatchError(last) || apierrors.IsNotFound(last) {
			return false, nil // a CRD the chart just applied is not served yet
		}
		return false, last
	})
	if err != nil {
		t.Fatalf("server-side apply of %s %s/%s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), fmtErr(last, err))
	}
}

func fmtErr(last, err error) error {
	if last != nil {
		return last
	}
	return err
}

// installStubCRDs installs CRDs for the kinds of cert-manager and the Prometheus Operator that the chart can
// render, accepting any fields.
func installStubCRDs(t *testing.T) {
	t.Helper()
	for _, s := range []struct{ group, kind, plural string }{
		{"cert-manager.io", "Issuer", "issuers"},
		{"cert-manager.io", "Certificate", "certificates"},
		{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
	} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		crd.Name = s.plural + "." + s.group
		crd.Spec = apiextensionsv1.CustomResourceDefinitionSpec{
			Group: s.group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: s.kind, Plural: s.plural, ListKind: s.kind + "List", Singular: lower(s.kind)},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		}
		// The test scheme has no apiextensions types: create it as unstructured.
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
		if err := env.Client.Create(t.Context(), u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating the stub CRD %s: %v", crd.Name, err)
		}
	}
}

func lower(s string) string { return strings.ToLower(s) }

// rbacKinds are the kinds of a release's identities and permissions.
var rbacKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// accessKinds are rbacKinds with the operator's Secret and the admission policies that restrict its
// identities: what a test applies to run the operator and the workloads as the chart's ServiceAccounts.
var accessKinds = append(slices.Clone(rbacKinds), "Secret", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")

// applyKinds applies the release's objects of those kinds, leaving out Helm's hooks, and deletes the
// cluster-scoped ones when the test ends.
func applyKinds(t *testing.T, r rendered, kinds []string) {
	t.Helper()
	for _, u := range r {
		if isHook(u) || !slices.Contains(kinds, u.GetKind()) {
			continue
		}
		apply(t, u)
		if u.GetNamespace() == "" {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), u.DeepCopy()) })
		}
	}
}
