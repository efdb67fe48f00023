package helm_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestHelmInstallUpgradeUninstall runs helm itself against the local apiserver: `helm install` of the chart
// succeeds (with crds.enabled=false: the control plane's CRDs are managed outside the release, as in a
// second release or with CRDs applied by kubectl; TestHelmCRDUpgrade covers the chart's CRDs), the operator (in
// process, as the chart's ServiceAccount, with the chart's arguments) fills the certificate Secret and
// injects the caBundle, and a `helm upgrade` keeps both: helm's three-way merge must not wipe what the
// operator wrote, or every FencedResource write would fail until the operator noticed. `helm uninstall`
// removes the webhook configuration and leaves the CRD it does not manage.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	namespace := env.Namespace(t)
	kc := kubeconfig(t, identity{})
	base := []string{"--namespace", namespace, "--kubeconfig", kc}
	out, err := helm(t, append([]string{"install", "fencekit", chartDir, "--set", "crds.enabled=false"}, base...)...)
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	// NOTES.txt tells the user what to do next, with this release's names.
	for _, want := range []string{
		"kubectl -n " + namespace + " rollout status deployment/fencekit-manager",
		"--clusterrole=fencekit-elector --serviceaccount=<namespace>:<serviceaccount>",
		"kind: FencedResource",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install's notes lack %q:\n%s", want, out)
		}
	}
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			_, _ = helm(t, append([]string{"uninstall", "fencekit", "--wait=false"}, base...)...)
		}
	})
	manifest, err := helm(t, append([]string{"get", "manifest", "fencekit"}, base...)...)
	if err != nil {
		t.Fatalf("helm get manifest: %v", err)
	}
	r := parse(t, manifest)
	const secretName, vwcName = "fencekit-webhook-cert", "fencekit-validating-webhook"
	checkCertRotation(t, serviceAccount(namespace, "fencekit-manager"), r, namespace, secretName, vwcName)

	secret, bundle := certState(t, namespace, secretName, vwcName)
	if out, err := helm(t, append([]string{"upgrade", "fencekit", chartDir, "--reuse-values", "--set", "replicaCount=3"}, base...)...); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	d := &appsv1.Deployment{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: "fencekit-manager"}, d); err != nil {
		t.Fatal(err)
	}
	if *d.Spec.Replicas != 3 {
		t.Errorf("after helm upgrade --set replicaCount=3 the Deployment has %d replicas", *d.Spec.Replicas)
	}
	secretAfter, bundleAfter := certState(t, namespace, secretName, vwcName)
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if !bytes.Equal(secret.Data[k], secretAfter.Data[k]) {
			t.Errorf("helm upgrade changed %s in Secret %s", k, secretName)
		}
	}
	if !bytes.Equal(bundle, bundleAfter) {
		t.Errorf("helm upgrade changed the caBundle the operator injected into %s", vwcName)
	}

	if out, err := helm(t, append([]string{"uninstall", "fencekit", "--wait=false"}, base...)...); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	uninstalled = true
	err = env.Client.Get(context.Background(), client.ObjectKey{Name: vwcName}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall the webhook configuration is still there (or: %v); FencedResource writes would fail", err)
	}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "fencedresources.fencing.fencekit.io"}, crdObject()); err != nil {
		t.Errorf("helm uninstall with crds.enabled=false must leave the CRD (and every FencedResource): %v", err)
	}
}

// certState is the webhook's certificate Secret and the caBundle of the first webhook of its configuration,
// both required to be set.
func certState(t *testing.T, namespace, secretName, vwcName string) (*corev1.Secret, []byte) {
	t.Helper()
	secret, vwc := readCerts(t, namespace, secretName, vwcName)
	if len(secret.Data["ca.crt"]) == 0 || len(vwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatalf("no certificate in Secret %s or no caBundle in %s", secretName, vwcName)
	}
	return secret, vwc.Webhooks[0].ClientConfig.CABundle
}

// readCerts reads the webhook's certificate Secret and its ValidatingWebhookConfiguration.
func readCerts(t *testing.T, namespace, secretName, vwcName string) (*corev1.Secret, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	t.Helper()
	secret := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: secretName}, secret); err != nil {
		t.Fatalf("reading Secret %s/%s: %v", namespace, secretName, err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatalf("reading ValidatingWebhookConfiguration %s: %v", vwcName, err)
	}
	return secret, vwc
}
