package helm_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/operator"
)

// TestCertManagerSwitchedOff: a release installed with certManager.enabled=true, whose certificate
// cert-manager issued (simulated: the Secret it writes and the caBundle its cainjector injects), is upgraded
// with helm to certManager.enabled=false. The upgrade succeeds (Helm never has to take over cert-manager's
// Secret, of another type and not Helm's), the Issuer and Certificate are gone, the chart's Secret and the
// operator's rights on it are there, nothing asks cert-manager to inject any more, and the operator, as the
// chart's ServiceAccount with the upgraded arguments, issues its own CA, injects it, and serves the webhook
// with a certificate that verifies against the new caBundle for the webhook Service's name.
func TestCertManagerSwitchedOff(t *testing.T) {
	installStubCRDs(t)
	namespace := env.Namespace(t)
	kc := kubeconfig(t, identity{})
	base := []string{"--namespace", namespace, "--kubeconfig", kc}
	const release, fullname = "cm", "cm-fencekit"
	if out, err := helm(t, append([]string{"install", release, chartDir, "--set", "certManager.enabled=true,crds.enabled=false"}, base...)...); err != nil {
		t.Fatalf("helm install with cert-manager: %v\n%s", err, out)
	}
	t.Cleanup(func() { uninstall(t, release, namespace, kc) })
	vwcName := fullname + "-validating-webhook"

	// cert-manager's part: the Certificate's Secret (type kubernetes.io/tls, cert-manager's, not Helm's) and
	// the caBundle.
	cert := &unstructured.Unstructured{}
	cert.SetAPIVersion("cert-manager.io/v1")
	cert.SetKind("Certificate")
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: fullname + "-webhook"}, cert); err != nil {
		t.Fatal(err)
	}
	cmSecret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	crt, key, err := certutil.GenerateSelfSignedCertKey(fullname+"-webhook."+namespace+".svc", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cmSecret, Namespace: namespace, Annotations: map[string]string{"cert-manager.io/certificate-name": cert.GetName()}},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"ca.crt": crt, "tls.crt": crt, "tls.key": key},
	}); err != nil {
		t.Fatalf("creating cert-manager's Secret %s: %v", cmSecret, err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = crt
	}
	if err := env.Client.Update(t.Context(), vwc); err != nil {
		t.Fatal(err)
	}

	if out, err := helm(t, append([]string{"upgrade", release, chartDir, "--reuse-values", "--set", "certManager.enabled=false"}, base...)...); err != nil {
		t.Fatalf("helm upgrade to certManager.enabled=false: %v\n%s", err, out)
	}
	for _, kind := range []string{"Issuer", "Certificate"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("cert-manager.io/v1")
		u.SetKind(kind)
		name := fullname + "-webhook"
		if kind == "Issuer" {
			name = fullname + "-selfsigned"
		}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, u); !apierrors.IsNotFound(err) {
			t.Errorf("after the upgrade the %s %s is still there (or: %v)", kind, name, err)
		}
	}
	chartSecret := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: fullname + "-webhook-cert"}, chartSecret); err != nil {
		t.Fatalf("the chart's certificate Secret after the upgrade: %v", err)
	}
	if chartSecret.Labels["app.kubernetes.io/managed-by"] != "Helm" || chartSecret.Name == cmSecret {
		t.Errorf("the operator's Secret %s must be the chart's own, not cert-manager's %s", chartSecret.Name, cmSecret)
	}
	// cert-manager does not delete a Certificate's Secret with it: the values document the leftover.
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: cmSecret}, &corev1.Secret{}); err != nil {
		t.Errorf("cert-manager's Secret %s: %v (the chart must not touch it)", cmSecret, err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	if a, ok := vwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Errorf("the webhook configuration still asks cert-manager to inject %s", a)
	}
	d := &appsv1.Deployment{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: fullname + "-manager"}, d); err != nil {
		t.Fatal(err)
	}
	if v := certVolume(t, d); v.EmptyDir == nil || args(t, d)["cert-rotation"] != "true" {
		t.Errorf("after the upgrade the operator does not rotate its own certificate: --cert-rotation=%s, volume %+v", args(t, d)["cert-rotation"], v.VolumeSource)
	}

	manifest, err := helm(t, append([]string{"get", "manifest", release}, base...)...)
	if err != nil {
		t.Fatal(err)
	}
	checkCertRotation(t, serviceAccount(namespace, fullname+"-manager"), parse(t, manifest), namespace, fullname+"-webhook-cert", vwcName,
		func(opts operator.Options) {
			if err := env.Client.Get(t.Context(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
				t.Fatal(err)
			}
			bundle := vwc.Webhooks[0].ClientConfig.CABundle
			if bytes.Equal(bundle, crt) {
				t.Fatal("the caBundle is still cert-manager's CA")
			}
			checkServing(t, opts, bundle, fullname+"-webhook."+namespace+".svc", *vwc.Webhooks[0].ClientConfig.Service.Path)
		})
}

// checkServing calls the operator's webhook server as the apiserver would: TLS verified against bundle for
// the Service's DNS name, an AdmissionReview POSTed to path, answered with an AdmissionReview.
func checkServing(t *testing.T, opts operator.Options, bundle []byte, serverName, path string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("the caBundle holds no certificate")
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: serverName}}}
	url := "https://" + net.JoinHostPort(opts.WebhookHost, strconv.Itoa(opts.WebhookPort)) + path
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"switch-test","operation":"CREATE",` +
		`"kind":{"group":"fencing.fencekit.io","version":"v1alpha1","kind":"FencedResource"},` +
		`"resource":{"group":"fencing.fencekit.io","version":"v1alpha1","resource":"fencedresources"},"namespace":"default","name":"x",` +
		`"userInfo":{"username":"admin"},"object":{"apiVersion":"fencing.fencekit.io/v1alpha1","kind":"FencedResource",` +
		`"metadata":{"name":"x","namespace":"default"},"spec":{"leaseName":"l"}}}}`
	resp, err := c.Post(url, "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatalf("calling the webhook with the new caBundle for %s: %v", serverName, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), `"uid":"switch-test"`) {
		t.Errorf("the webhook answered %s: %s", resp.Status, body.String())
	}
}
