package certs

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 365 * 24 * time.Hour
	// maxConflicts bounds how often the bootstrap re-reads the Secret after losing a write to another replica.
	maxConflicts = 5
)

// Keys of the Secret, as cert-controller writes them.
const (
	keyCACert = "ca.crt"
	keyCAKey  = "ca.key"
	keyCert   = corev1.TLSCertKey
	keyKey    = corev1.TLSPrivateKeyKey
)

// bootstrap makes sure the Secret holds a valid CA and serving certificate, creating or renewing them with
// cert-controller's functions if needed, and writes the serving certificate into opts.CertDir.
// controller-runtime starts webhook servers before caches and the rotator, and its webhook server fails if
// the files are missing, so this has to happen before the manager starts.
func bootstrap(ctx context.Context, reader client.Reader, writer client.Writer, cr *rotator.CertRotator, opts Options) error {
	for conflicts := 0; ; {
		secret := &corev1.Secret{}
		err := reader.Get(ctx, cr.SecretKey, secret)
		if apierrors.IsNotFound(err) {
			if err := createSecret(ctx, writer, opts); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("reading Secret %s: %w", cr.SecretKey, err)
		}
		if !validServerCert(cr, secret.Data) {
			if err := renew(cr, secret); err != nil {
				return err
			}
			if err := writer.Update(ctx, secret); err != nil {
				if apierrors.IsConflict(err) && conflicts < maxConflicts {
					conflicts++ // another replica renewed first: use its certificate
					continue
				}
				return fmt.Errorf("writing Secret %s: %w", cr.SecretKey, err)
			}
		}
		return WriteFiles(opts.CertDir, secret.Data[keyCert], secret.Data[keyKey])
	}
}

// createSecret creates the empty Secret the rotator fills. The Helm chart creates it, so the operator needs
// no create permission there; this path is for installations without the chart.
func createSecret(ctx context.Context, writer client.Writer, opts Options) error {
	secret := &corev1.Secret{Type: corev1.SecretTypeOpaque}
	secret.Namespace, secret.Name = opts.Namespace, opts.SecretName
	secret.Labels = map[string]string{"app.kubernetes.io/name": "fencekit", "app.kubernetes.io/component": "webhook-cert"}
	if err := writer.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Secret %s/%s (the Helm chart creates it; without the chart, create it or allow the operator to): %w",
			opts.Namespace, opts.SecretName, err)
	}
	return nil
}

// renew puts a new serving certificate into secret.Data, and a new CA first if the current one is missing or
// expires within the lookahead.
func renew(cr *rotator.CertRotator, secret *corev1.Secret) error {
	now := time.Now()
	begin := now.Add(-time.Hour)
	ca, err := parseCA(secret.Data)
	if err != nil || !validCACert(secret.Data) {
		if ca, err = cr.CreateCACert(begin, now.Add(cr.CaCertDuration)); err != nil {
			return fmt.Errorf("creating the webhook CA: %w", err)
		}
	}
	cert, key, err := cr.CreateCertPEM(ca, begin, now.Add(cr.ServerCertDuration))
	if err != nil {
		return fmt.Errorf("creating the webhook serving certificate: %w", err)
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	secret.Data[keyCACert], secret.Data[keyCAKey] = ca.CertPEM, ca.KeyPEM
	secret.Data[keyCert], secret.Data[keyKey] = cert, key
	return nil
}

func validCACert(data map[string][]byte) bool {
	ok, err := rotator.ValidCert(data[keyCACert], data[keyCACert], data[keyCAKey], caName, nil, time.Now().Add(lookahead))
	return err == nil && ok
}

func validServerCert(cr *rotator.CertRotator, data map[string][]byte) bool {
	if !validCACert(data) {
		return false
	}
	ok, err := rotator.ValidCert(data[keyCACert], data[keyCert], data[keyKey], cr.DNSName, cr.ExtKeyUsages, time.Now().Add(lookahead))
	return err == nil && ok
}

// parseCA reads the CA in the format cert-controller writes (PEM certificate, PKCS#1 RSA key).
func parseCA(data map[string][]byte) (*rotator.KeyPairArtifacts, error) {
	certBlock, _ := pem.Decode(data[keyCACert])
	keyBlock, _ := pem.Decode(data[keyCAKey])
	if certBlock == nil || keyBlock == nil {
		return nil, errors.New("no CA in the Secret")
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA certificate: %w", err)
	}
	key, err := x509.ParsePKCS1PrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the CA key: %w", err)
	}
	return &rotator.KeyPairArtifacts{Cert: cert, Key: key, CertPEM: data[keyCACert], KeyPEM: data[keyCAKey]}, nil
}
