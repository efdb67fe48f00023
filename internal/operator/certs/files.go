package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// fileSync keeps CertDir equal to the Secret's serving certificate on this replica.
type fileSync struct {
	cache cache.Cache
	opts  Options
}

var (
	_ manager.Runnable               = (*fileSync)(nil)
	_ manager.LeaderElectionRunnable = (*fileSync)(nil)
)

// everyReplica runs a runnable on every replica, leader or not.
type everyReplica struct{ manager.Runnable }

func (everyReplica) NeedLeaderElection() bool { return false }

func (f *fileSync) NeedLeaderElection() bool { return false }

func (f *fileSync) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhook-cert-files")
	inf, err := f.cache.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return err
	}
	write := func(obj any) {
		secret, ok := obj.(*corev1.Secret)
		if !ok || secret.Name != f.opts.SecretName {
			return
		}
		cert, key := secret.Data[keyCert], secret.Data[keyKey]
		if _, err := tls.X509KeyPair(cert, key); err != nil {
			return // not filled yet, or half-written by hand: keep the files we have
		}
		if current, err := os.ReadFile(filepath.Join(f.opts.CertDir, keyCert)); err == nil && bytes.Equal(current, cert) {
			return
		}
		if err := WriteFiles(f.opts.CertDir, cert, key); err != nil {
			log.Error(err, "Writing the webhook certificate", "dir", f.opts.CertDir)
			return
		}
		log.Info("Wrote the webhook certificate", "dir", f.opts.CertDir, "secret", f.opts.Namespace+"/"+f.opts.SecretName)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
	}); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
