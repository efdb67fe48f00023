package chaos

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/operator/certs"
)

// WebhookRotator rotates the admission webhook's CA and serving certificate (fault F11) the way a rotator
// in the operator's pod does it (internal/operator/certs: cert-controller writes a new CA and serving certificate into
// the Secret, injects the CA into the caBundle of the ValidatingWebhookConfiguration, and each replica writes
// the certificate into its CertDir, where controller-runtime's webhook server reloads it), without the
// Secret: the two halves a real rotation applies independently are applied here directly, in a chosen order
// and with a chosen time between them.
type WebhookRotator struct {
	// Admin updates the ValidatingWebhookConfiguration.
	Admin client.Client
	// ConfigName is the ValidatingWebhookConfiguration whose webhooks call the server.
	ConfigName string
	// CertDir is where the webhook server reads tls.crt and tls.key (and reloads them when they change).
	CertDir string
	// Host is the host name or IP address the apiserver dials; the certificate is valid for it and
	// localhost.
	Host string
	// Backend is the webhook server's own address (not a proxy's), to see which certificate it presents.
	Backend string
}

// Rotation is what one rotation did, for the log.
type Rotation struct {
	// Served is how long after the rotation started the webhook server presented the new certificate.
	Served time.Duration
	// Trusted is how long after the rotation started the apiserver called the webhook successfully again
	// (or for the first time after a failed call).
	Trusted time.Duration
	// Failures counts the probe requests that failed calling the webhook during the rotation.
	Failures int
}

// Rotate replaces the CA and the serving certificate in the given order (RotateBundleFirst,
// RotateFilesFirst, RotateOverlap), waiting between the two halves, and returns once the webhook server
// presents the new certificate and probe reports that the apiserver calls the webhook again. probe makes an
// admission request through the webhook and returns its error; calling reports whether an error means the
// apiserver failed to call the webhook.
func (w *WebhookRotator) Rotate(ctx context.Context, order string, between time.Duration, probe func(context.Context) error, calling func(error) bool) (res Rotation, err error) {
	ca, caKey, err := newCA()
	if err != nil {
		return res, err
	}
	cert, key, leaf, err := newServingCert(ca, caKey, w.Host)
	if err != nil {
		return res, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	old, err := w.bundle(ctx)
	if err != nil {
		return res, err
	}
	start := time.Now()
	failures := 0
	// Probe the apiserver's trust in the background while the rotation runs.
	probeCtx, stopProbe := context.WithCancel(ctx)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for probeCtx.Err() == nil {
			if err := probe(probeCtx); err != nil && calling(err) && probeCtx.Err() == nil {
				failures++
			}
			_ = sleep(probeCtx, 100*time.Millisecond)
		}
	}()
	defer func() { stopProbe(); <-probed; res.Failures = failures }()

	files := func() error {
		if err := certs.WriteFiles(w.CertDir, cert, key); err != nil {
			return err
		}
		served, err := w.waitServing(ctx, leaf)
		res.Served = served.Sub(start)
		return err
	}
	var steps []func() error
	switch order {
	case RotateBundleFirst:
		steps = []func() error{func() error { return w.setBundle(ctx, caPEM) }, files}
	case RotateFilesFirst:
		steps = []func() error{files, func() error { return w.setBundle(ctx, caPEM) }}
	case RotateOverlap:
		steps = []func() error{
			func() error {
				if err := w.setBundle(ctx, append(append(bytes.TrimSpace(old), '\n'), caPEM...)); err != nil {
					return err
				}
				return files()
			},
			func() error { return w.setBundle(ctx, caPEM) },
		}
	default:
		return res, fmt.Errorf("unknown rotation order %q (known: %v)", order, rotations)
	}
	for i, step := range steps {
		if i > 0 {
			if err := sleep(ctx, between); err != nil {
				return res, err
			}
		}
		if err := step(); err != nil {
			return res, err
		}
	}
	// The rotation is over when the apiserver calls the webhook successfully with the new CA only.
	var last error
	for deadline := time.Now().Add(60 * time.Second); ; {
		last = probe(ctx)
		if last == nil || !calling(last) {
			res.Trusted = time.Since(start)
			return res, nil
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("the apiserver still fails to call the webhook 60s after the rotation: %w", last)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return res, err
		}
	}
}

// bundle returns the caBundle of the configuration's first webhook.
func (w *WebhookRotator) bundle(ctx context.Context) ([]byte, error) {
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := w.Admin.Get(ctx, types.NamespacedName{Name: w.ConfigName}, &vwc); err != nil {
		return nil, fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", w.ConfigName, err)
	}
	if len(vwc.Webhooks) == 0 {
		return nil, fmt.Errorf("ValidatingWebhookConfiguration %s has no webhooks", w.ConfigName)
	}
	return vwc.Webhooks[0].ClientConfig.CABundle, nil
}

// setBundle sets the caBundle of every webhook of the configuration, as cert-controller's injection does.
func (w *WebhookRotator) setBundle(ctx context.Context, bundle []byte) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		if err := w.Admin.Get(ctx, types.NamespacedName{Name: w.ConfigName}, &vwc); err != nil {
			return err
		}
		for i := range vwc.Webhooks {
			vwc.Webhooks[i].ClientConfig.CABundle = bundle
		}
		if err := w.Admin.Update(ctx, &vwc); err != nil {
			return fmt.Errorf("setting the caBundle of ValidatingWebhookConfiguration %s: %w", w.ConfigName, err)
		}
		return nil
	})
}

// waitServing waits until the webhook server presents leaf and returns when it first did.
func (w *WebhookRotator) waitServing(ctx context.Context, leaf []byte) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // only reads which certificate is served
		conn, err := d.DialContext(ctx, "tcp", w.Backend)
		if err == nil {
			certs := conn.(*tls.Conn).ConnectionState().PeerCertificates
			_ = conn.Close()
			if len(certs) > 0 && bytes.Equal(certs[0].Raw, leaf) {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Now(), fmt.Errorf("the webhook server at %s does not present the new certificate 30s after it was written to %s", w.Backend, w.CertDir)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return time.Now(), err
		}
	}
}

func newCA() (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "fencekit-webhook-ca", Organization: []string{"fencekit"}},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	return ca, key, err
}

// newServingCert returns a serving certificate for host and localhost signed by ca, as PEM, and its DER.
func newServingCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, host string) (certPEM, keyPEM, der []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	} else if host != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("creating the serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), der, nil
}
