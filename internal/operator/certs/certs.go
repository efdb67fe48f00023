package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

const (
	// caName is the common name of the CA the rotator creates.
	caName = "fencekit-webhook-ca"
	// caOrganization is the organization of the CA the rotator creates.
	caOrganization = "fencekit"
	// bootstrapTimeout bounds the API calls AddRotator makes before the manager starts.
	bootstrapTimeout = 30 * time.Second
	// lookahead is how long before expiry a certificate is renewed (cert-controller's default, stated here
	// because the bootstrap must use the same value as the rotator).
	lookahead = 90 * 24 * time.Hour
	// fieldOwner is the field manager of the operator's writes to the Secret and the webhook configuration.
	fieldOwner = "fencekit-cert-rotator"
)

// Options say where the webhook's certificate lives and whom it serves.
type Options struct {
	// Namespace is the operator's namespace: the Secret and the webhook Service live there.
	Namespace string
	// SecretName is the Secret that holds the CA and the serving certificate (ca.crt, ca.key, tls.crt, tls.key).
	SecretName string
	// ServiceName is the webhook Service; the certificate is valid for <service>.<namespace>.svc.
	ServiceName string
	// WebhookConfigName is the ValidatingWebhookConfiguration whose caBundle is kept equal to the CA.
	WebhookConfigName string
	// CertDir is the directory the webhook server reads tls.crt and tls.key from; it must be writable.
	// Empty means controller-runtime's default, <temp dir>/k8s-webhook-server/serving-certs.
	CertDir string
}

// withDefaults fills CertDir as controller-runtime's webhook server does.
func (o Options) withDefaults() Options {
	if o.CertDir == "" {
		o.CertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	for _, f := range []struct{ name, value string }{
		{"namespace", o.Namespace},
		{"secretName", o.SecretName},
		{"serviceName", o.ServiceName},
		{"webhookConfigName", o.WebhookConfigName},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s must not be empty", f.name))
		}
	}
	return errors.Join(errs...)
}

// dnsName is the name the apiserver dials: <service>.<namespace>.svc.
func (o Options) dnsName() string { return o.ServiceName + "." + o.Namespace + ".svc" }

// rotators counts the rotators created in this process: controller-runtime requires each controller's name
// to be unique within a process (tests run several replicas side by side).
var rotators atomic.Int64

func controllerName() string {
	if n := rotators.Add(1); n > 1 {
		return "fencekit-cert-rotator-" + strconv.FormatInt(n, 10)
	}
	return "fencekit-cert-rotator"
}

// newRotator returns the cert-controller rotator for these options, used only for its certificate functions
// (CreateCACert, CreateCertPEM): the bootstrap and the rotation create identical certificates with it. Its
// own controller is not run: its cache lists every Secret of the namespace and every webhook configuration,
// which would need the right to read them all (see rotation).
func newRotator(o Options) *rotator.CertRotator {
	return &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
		CertDir:        o.CertDir,
		CAName:         caName,
		CAOrganization: caOrganization,
		DNSName:        o.dnsName(),
		ExtraDNSNames: []string{
			o.ServiceName + "." + o.Namespace + ".svc.cluster.local",
			o.ServiceName + "." + o.Namespace,
		},
		ExtKeyUsages:       &[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		CaCertDuration:     caValidity,
		ServerCertDuration: serverValidity,
		LookaheadInterval:  lookahead,
	}
}

// AddRotator adds webhook certificate management to mgr. Call it before mgr.Start: it makes sure the Secret
// holds a valid CA and serving certificate and writes them into opts.CertDir, then registers the rotation
// (renewal, caBundle injection) and a watcher that keeps CertDir equal to the Secret, both on a cache that
// sees only the Secret and the webhook configuration by name. ready closes when the caBundle has been
// injected.
func AddRotator(mgr manager.Manager, opts Options) (ready <-chan struct{}, err error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("certs: invalid options: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootstrapTimeout)
	defer cancel()
	cr := newRotator(opts)
	if err := bootstrap(ctx, mgr.GetAPIReader(), mgr.GetClient(), cr, opts); err != nil {
		return nil, fmt.Errorf("certs: bootstrapping the webhook certificate: %w", err)
	}
	c, err := newNarrowCache(mgr, opts)
	if err != nil {
		return nil, fmt.Errorf("certs: creating the cache of Secret %s/%s: %w", opts.Namespace, opts.SecretName, err)
	}
	if err := mgr.Add(everyReplica{c}); err != nil {
		return nil, err
	}
	if err := mgr.Add(&fileSync{cache: c, opts: opts}); err != nil {
		return nil, err
	}
	r, err := addRotation(mgr, c, cr, opts)
	if err != nil {
		return nil, fmt.Errorf("certs: adding the certificate rotation: %w", err)
	}
	return r.ready, nil
}
