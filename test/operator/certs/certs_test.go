package certs_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fencekit/fencekit/internal/operator/certs"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// replica is one operator replica as far as certificates go: a manager with a webhook server on CertDir.
type replica struct {
	opts  certs.Options
	addr  string
	ready <-chan struct{}
}

// startReplica adds the rotator to a fresh manager and starts it until the test ends.
func startReplica(t *testing.T, opts certs.Options) *replica {
	t.Helper()
	return startReplicas(t, opts)[0]
}

// startReplicas starts one replica per options, calling AddRotator for all of them at the same time, as
// replicas of a Deployment that start together do.
func startReplicas(t *testing.T, opts ...certs.Options) []*replica {
	t.Helper()
	replicas := make([]*replica, len(opts))
	mgrs := make([]manager.Manager, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		port := testenv.FreePort(t)
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
			Scheme:                 env.Scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			WebhookServer:          webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: o.CertDir}),
		})
		if err != nil {
			t.Fatalf("creating a manager: %v", err)
		}
		mgrs[i] = mgr
		replicas[i] = &replica{opts: o, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
		wg.Go(func() { replicas[i].ready, errs[i] = certs.AddRotator(mgr, o) })
	}
	wg.Wait()
	for i, mgr := range mgrs {
		if errs[i] != nil {
			t.Fatalf("AddRotator: %v", errs[i])
		}
		// The webhook server is registered the way the operator does it, by asking for it.
		_ = mgr.GetWebhookServer()
		ctx := t.Context()
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			if err := <-done; err != nil {
				t.Errorf("manager stopped with an error: %v", err)
			}
		})
	}
	return replicas
}

func (r *replica) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-r.ready:
	case <-time.After(90 * time.Second):
		t.Fatalf("the rotator for %s/%s never reported ready", r.opts.Namespace, r.opts.SecretName)
	}
}

// seedSecret stores in opts' Secret a CA valid for caValidity and a serving certificate that expires in a
// day, both issued by cert-controller's functions, and returns the CA.
func seedSecret(t *testing.T, opts certs.Options, caValidity time.Duration) *rotator.KeyPairArtifacts {
	t.Helper()
	cr := &rotator.CertRotator{CAName: "fencekit-webhook-ca", CAOrganization: "fencekit",
		DNSName: opts.ServiceName + "." + opts.Namespace + ".svc", ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	now := time.Now()
	ca, err := cr.CreateCACert(now.Add(-time.Hour), now.Add(caValidity))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := cr.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{Data: map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM, "tls.crt": cert, "tls.key": key}}
	secret.Namespace, secret.Name = opts.Namespace, opts.SecretName
	if err := env.Client.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	return ca
}

// newOptions creates a namespace and a ValidatingWebhookConfiguration with an empty caBundle.
func newOptions(t *testing.T) certs.Options {
	t.Helper()
	ns := env.Namespace(t)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	vwc.Name = "fencekit-test-" + ns
	vwc.Webhooks = []admissionregistrationv1.ValidatingWebhook{{
		Name: "vfencedresource-v1alpha1.fencing.fencekit.io",
		ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: ns, Name: "fencekit-webhook", Path: ptr.To("/validate"),
		}},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"fencing.fencekit.io"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"fencedresources"},
			},
		}},
		// Nothing in the test namespace is a FencedResource: the webhook never sees a request.
		NamespaceSelector:       nil,
		ObjectSelector:          nil,
		FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		AdmissionReviewVersions: []string{"v1"},
	}}
	if err := env.Client.Create(t.Context(), vwc); err != nil {
		t.Fatalf("creating the webhook configuration: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), vwc) })
	return certs.Options{
		Namespace:         ns,
		SecretName:        "fencekit-webhook-cert",
		ServiceName:       "fencekit-webhook",
		WebhookConfigName: vwc.Name,
		CertDir:           t.TempDir(),
	}
}

func getSecret(t *testing.T, opts certs.Options) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: opts.Namespace, Name: opts.SecretName}, s); err != nil {
		t.Fatalf("reading the certificate Secret: %v", err)
	}
	return s
}

func caBundle(t *testing.T, opts certs.Options) []byte {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(t.Context(), types.NamespacedName{Name: opts.WebhookConfigName}, vwc); err != nil {
		t.Fatalf("reading the webhook configuration: %v", err)
	}
	return vwc.Webhooks[0].ClientConfig.CABundle
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		t.Fatalf("no PEM certificate in %q", pemBytes)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("reading %s from the cert dir: %v", name, err)
	}
	return b
}

// dialWebhook performs a TLS handshake with the webhook server the way the apiserver does: trusting only the
// caBundle and checking the Service's DNS name.
func dialWebhook(t *testing.T, r *replica, bundle []byte) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatalf("the caBundle holds no certificate: %q", bundle)
	}
	var conn *tls.Conn
	testenv.Eventually(t, "a TLS handshake with the webhook server, trusting the caBundle", func() (bool, string) {
		var err error
		conn, err = tls.Dial("tcp", r.addr, &tls.Config{RootCAs: pool, ServerName: r.opts.ServiceName + "." + r.opts.Namespace + ".svc"})
		return err == nil, fmt.Sprint(err)
	})
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

func TestAddRotatorIssuesInjectsAndServes(t *testing.T) {
	opts := newOptions(t)
	r := startReplica(t, opts)
	r.waitReady(t)

	secret := getSecret(t, opts)
	for _, k := range []string{"ca.crt", "ca.key", "tls.crt", "tls.key"} {
		if len(secret.Data[k]) == 0 {
			t.Errorf("Secret %s/%s has no %s", opts.Namespace, opts.SecretName, k)
		}
	}
	if got := caBundle(t, opts); !bytes.Equal(got, secret.Data["ca.crt"]) {
		t.Errorf("caBundle of %s is not the Secret's CA:\n%s", opts.WebhookConfigName, got)
	}
	if got := readFile(t, opts.CertDir, "tls.crt"); !bytes.Equal(got, secret.Data["tls.crt"]) {
		t.Errorf("tls.crt in CertDir differs from the Secret's")
	}
	if got := readFile(t, opts.CertDir, "tls.key"); !bytes.Equal(got, secret.Data["tls.key"]) {
		t.Errorf("tls.key in CertDir differs from the Secret's")
	}
	served := dialWebhook(t, r, caBundle(t, opts))
	want := parseCert(t, secret.Data["tls.crt"])
	if !served.Equal(want) {
		t.Errorf("the webhook server serves %v, want the Secret's certificate %v", served.Subject, want.Subject)
	}
	if got, least := time.Until(served.NotAfter), 300*24*time.Hour; got < least {
		t.Errorf("serving certificate valid for %v, want at least %v", got, least)
	}
}

func TestRenewsBeforeExpiry(t *testing.T) {
	opts := newOptions(t)
	// A CA valid for years and a serving certificate that expires tomorrow, well inside the 90-day lookahead.
	ca := seedSecret(t, opts, 5*365*24*time.Hour)

	r := startReplica(t, opts)
	r.waitReady(t)

	got := getSecret(t, opts)
	if !bytes.Equal(got.Data["ca.crt"], ca.CertPEM) {
		t.Errorf("the CA was replaced although it was valid for years; only the serving certificate should be renewed")
	}
	renewed := parseCert(t, got.Data["tls.crt"])
	if time.Until(renewed.NotAfter) < 300*24*time.Hour {
		t.Errorf("serving certificate expires %v: not renewed", renewed.NotAfter)
	}
	if on := readFile(t, opts.CertDir, "tls.crt"); !bytes.Equal(on, got.Data["tls.crt"]) {
		t.Errorf("CertDir still holds the expiring certificate")
	}
	if served := dialWebhook(t, r, caBundle(t, opts)); !served.Equal(renewed) {
		t.Errorf("the webhook server serves the certificate expiring %v, want the renewed one", served.NotAfter)
	}
}

func TestReplicasAgree(t *testing.T) {
	opts := newOptions(t)
	bOpts := opts
	bOpts.CertDir = t.TempDir()
	// Both replicas start at once with no Secret: the Secret's resourceVersion decides which certificate
	// wins, and both end up serving it.
	rs := startReplicas(t, opts, bOpts)
	ra, rb := rs[0], rs[1]
	ra.waitReady(t)
	rb.waitReady(t)

	secret := getSecret(t, opts)
	want := parseCert(t, secret.Data["tls.crt"])
	for _, r := range []*replica{ra, rb} {
		// The losing replica's files follow the Secret through its watch.
		var served *x509.Certificate
		_ = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			served = dialWebhook(t, r, caBundle(t, opts))
			return served.Equal(want), nil
		})
		if !served.Equal(want) {
			t.Errorf("replica with CertDir %s serves a certificate other than the Secret's", r.opts.CertDir)
		}
	}
}

func TestReinjectsAResetCABundle(t *testing.T) {
	opts := newOptions(t)
	r := startReplica(t, opts)
	r.waitReady(t)
	want := getSecret(t, opts).Data["ca.crt"]

	// Something (kubectl apply, helm upgrade --force) rewrites the webhook configuration without the caBundle.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(t.Context(), types.NamespacedName{Name: opts.WebhookConfigName}, vwc); err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].ClientConfig.CABundle = nil
	if err := env.Client.Update(t.Context(), vwc); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return bytes.Equal(caBundle(t, opts), want), nil
	}); err != nil {
		t.Fatalf("the rotator did not restore the caBundle of a rewritten webhook configuration: %v", err)
	}
}

func TestReplacesAnExpiringCA(t *testing.T) {
	opts := newOptions(t)
	// A CA (and serving certificate) that expire tomorrow: both are replaced, and the caBundle follows.
	ca := seedSecret(t, opts, 24*time.Hour)

	r := startReplica(t, opts)
	r.waitReady(t)

	got := getSecret(t, opts)
	if bytes.Equal(got.Data["ca.crt"], ca.CertPEM) {
		t.Fatal("the CA expiring tomorrow was kept")
	}
	if newCA := parseCert(t, got.Data["ca.crt"]); time.Until(newCA.NotAfter) < 5*365*24*time.Hour {
		t.Errorf("the new CA expires %v", newCA.NotAfter)
	}
	if !bytes.Equal(caBundle(t, opts), got.Data["ca.crt"]) {
		t.Error("the caBundle does not hold the new CA")
	}
	if served := dialWebhook(t, r, got.Data["ca.crt"]); !served.Equal(parseCert(t, got.Data["tls.crt"])) {
		t.Error("the webhook server does not serve the certificate signed by the new CA")
	}
}

// TestRenewsWhileRunning: a serving certificate that stops being valid while the operator runs (here, a
// Secret rewritten with one that expires tomorrow) is renewed by the running rotation, the files follow and
// the caBundle still holds the CA; the rotation reads the Secret through its own narrow cache.
func TestRenewsWhileRunning(t *testing.T) {
	opts := newOptions(t)
	r := startReplica(t, opts)
	r.waitReady(t)

	secret := getSecret(t, opts)
	cr := &rotator.CertRotator{CAName: "fencekit-webhook-ca", CAOrganization: "fencekit",
		DNSName: opts.ServiceName + "." + opts.Namespace + ".svc", ExtKeyUsages: &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	keyBlock, _ := pem.Decode(secret.Data["ca.key"])
	if keyBlock == nil {
		t.Fatal("no CA key in the Secret")
	}
	caKey, err := x509.ParsePKCS1PrivateKey(keyBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ca := &rotator.KeyPairArtifacts{Cert: parseCert(t, secret.Data["ca.crt"]), Key: caKey, CertPEM: secret.Data["ca.crt"], KeyPEM: secret.Data["ca.key"]}
	now := time.Now()
	expiring, key, err := cr.CreateCertPEM(ca, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	secret.Data["tls.crt"], secret.Data["tls.key"] = expiring, key
	if err := env.Client.Update(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	var renewed *corev1.Secret
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		renewed = getSecret(t, opts)
		return time.Until(parseCert(t, renewed.Data["tls.crt"]).NotAfter) > 300*24*time.Hour, nil
	}); err != nil {
		t.Fatalf("the running rotation did not renew a serving certificate that expires tomorrow: %v", err)
	}
	if !bytes.Equal(renewed.Data["ca.crt"], ca.CertPEM) {
		t.Error("the CA was replaced although it was valid")
	}
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return bytes.Equal(readFile(t, opts.CertDir, "tls.crt"), renewed.Data["tls.crt"]), nil
	}); err != nil {
		t.Errorf("CertDir does not hold the renewed certificate: %v", err)
	}
	waitOneGeneration(t, opts.CertDir)
	checkLayout(t, opts.CertDir, pemPair{cert: renewed.Data["tls.crt"], key: renewed.Data["tls.key"]})
	// The webhook server's certwatcher follows the swap of ..data: a handshake gets the renewed certificate.
	want := parseCert(t, renewed.Data["tls.crt"])
	var served *x509.Certificate
	_ = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		served = dialWebhook(t, r, renewed.Data["ca.crt"])
		return served.Equal(want), nil
	})
	if !served.Equal(want) {
		t.Errorf("after the swap the webhook server serves the certificate expiring %v, want the renewed one expiring %v", served.NotAfter, want.NotAfter)
	}
	if !bytes.Equal(caBundle(t, opts), renewed.Data["ca.crt"]) {
		t.Error("the caBundle does not hold the Secret's CA")
	}
}

// TestConvertsAnOldCertDir: an emptyDir that outlives a container restart still holds the plain tls.crt and
// tls.key an older fencekit wrote; the operator converts it to the ..data layout and serves the Secret's
// certificate.
func TestConvertsAnOldCertDir(t *testing.T) {
	opts := newOptions(t)
	old := newPairs(t, 1)[0]
	if err := os.WriteFile(filepath.Join(opts.CertDir, "tls.crt"), old.cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(opts.CertDir, "tls.key"), old.key, 0o600); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, opts)
	r.waitReady(t)

	secret := getSecret(t, opts)
	waitOneGeneration(t, opts.CertDir)
	checkLayout(t, opts.CertDir, pemPair{cert: secret.Data["tls.crt"], key: secret.Data["tls.key"]})
	if served := dialWebhook(t, r, secret.Data["ca.crt"]); !served.Equal(parseCert(t, secret.Data["tls.crt"])) {
		t.Errorf("the webhook server serves %v, want the Secret's certificate", served.Subject)
	}
}

// waitOneGeneration waits until the running writer has removed the generations its last swap of ..data
// replaced: it removes them just after the swap, so a reader that sees the new pair can still see them.
func waitOneGeneration(t *testing.T, dir string) {
	t.Helper()
	var names []string
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return false, err
		}
		names = names[:0]
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return len(names) == 4, nil // one generation, ..data, tls.crt, tls.key
	}); err != nil {
		t.Fatalf("the cert dir %s still holds %v: %v", dir, names, err)
	}
}
