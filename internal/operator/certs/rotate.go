package certs

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// checkInterval is how often the rotator checks the certificates without being told of a change (renewal
// starts 90 days before expiry, so twice a day is ample).
const checkInterval = 12 * time.Hour

// newNarrowCache returns a cache that sees exactly two objects: the certificate Secret and the webhook
// configuration, each listed and watched with a metadata.name field selector. The apiserver authorizes such
// a list or watch against RBAC rules restricted to that name, so the operator needs no right to list the
// other Secrets of its namespace (or, with this cache alone, the other webhook configurations).
func newNarrowCache(mgr manager.Manager, opts Options) (cache.Cache, error) {
	return cache.New(mgr.GetConfig(), cache.Options{
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Field: fields.OneTermEqualSelector("metadata.name", opts.SecretName)},
			&admissionregistrationv1.ValidatingWebhookConfiguration{}: {
				Field: fields.OneTermEqualSelector("metadata.name", opts.WebhookConfigName),
			},
		},
	})
}

// rotation keeps the Secret's certificates valid and the webhook configuration's caBundle equal to its CA.
// It runs on every replica; its writes are compare-and-swap (the resourceVersion read from the cache), so
// replicas that race converge on one certificate.
type rotation struct {
	reader client.Reader
	writer client.Writer
	cr     *rotator.CertRotator
	opts   Options
	// ready closes once the caBundle has been seen equal to the Secret's CA.
	ready     chan struct{}
	readyOnce sync.Once
}

var _ reconcile.Reconciler = (*rotation)(nil)

// addRotation registers the rotation controller, watching the narrow cache c.
func addRotation(mgr manager.Manager, c cache.Cache, cr *rotator.CertRotator, opts Options) (*rotation, error) {
	r := &rotation{reader: c, writer: mgr.GetClient(), cr: cr, opts: opts, ready: make(chan struct{})}
	ctrl, err := controller.NewUnmanaged(controllerName(), controller.Options{Reconciler: r})
	if err != nil {
		return nil, err
	}
	key := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: opts.Namespace, Name: opts.SecretName}}
	always := func(context.Context, client.Object) []reconcile.Request { return []reconcile.Request{key} }
	if err := ctrl.Watch(source.Kind(c, client.Object(&corev1.Secret{}), handler.EnqueueRequestsFromMapFunc(always))); err != nil {
		return nil, fmt.Errorf("watching Secret %s/%s: %w", opts.Namespace, opts.SecretName, err)
	}
	if err := ctrl.Watch(source.Kind(c, client.Object(&admissionregistrationv1.ValidatingWebhookConfiguration{}), handler.EnqueueRequestsFromMapFunc(always))); err != nil {
		return nil, fmt.Errorf("watching ValidatingWebhookConfiguration %s: %w", opts.WebhookConfigName, err)
	}
	if err := mgr.Add(everyReplica{ctrl}); err != nil {
		return nil, err
	}
	return r, nil
}

// Reconcile renews the certificates in the Secret if they expire within the lookahead, then injects the CA
// into every webhook of the configuration.
func (r *rotation) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	secret := &corev1.Secret{}
	if err := r.reader.Get(ctx, req.NamespacedName, secret); err != nil {
		return reconcile.Result{}, fmt.Errorf("reading Secret %s: %w", req.NamespacedName, err)
	}
	if !secret.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	if !validServerCert(r.cr, secret.Data) {
		secret = secret.DeepCopy()
		if err := renew(r.cr, secret); err != nil {
			return reconcile.Result{}, err
		}
		if err := r.writer.Update(ctx, secret, client.FieldOwner(fieldOwner)); err != nil {
			return reconcile.Result{}, fmt.Errorf("writing the renewed certificate to Secret %s: %w", req.NamespacedName, err)
		}
		logf.FromContext(ctx).Info("Renewed the webhook certificate", "secret", req.NamespacedName)
		return reconcile.Result{}, nil // the Secret's update event brings the caBundle in step
	}
	if err := r.injectCA(ctx, secret.Data[keyCACert]); err != nil {
		return reconcile.Result{}, err
	}
	r.readyOnce.Do(func() { close(r.ready) })
	return reconcile.Result{RequeueAfter: checkInterval}, nil
}

// injectCA sets the caBundle of every webhook of the configuration to ca, and writes nothing else: the
// apiserver refuses any other change from the operator (the chart's policy <release>-operator-webhooks).
func (r *rotation) injectCA(ctx context.Context, ca []byte) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.reader.Get(ctx, types.NamespacedName{Name: r.opts.WebhookConfigName}, vwc); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("ValidatingWebhookConfiguration %s does not exist: its caBundle cannot be injected", r.opts.WebhookConfigName)
		}
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", r.opts.WebhookConfigName, err)
	}
	changed := false
	vwc = vwc.DeepCopy()
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, ca) {
			vwc.Webhooks[i].ClientConfig.CABundle = ca
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := r.writer.Update(ctx, vwc, client.FieldOwner(fieldOwner)); err != nil {
		return fmt.Errorf("injecting the CA into ValidatingWebhookConfiguration %s: %w", r.opts.WebhookConfigName, err)
	}
	logf.FromContext(ctx).Info("Injected the webhook CA", "webhookConfiguration", r.opts.WebhookConfigName)
	return nil
}
