package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
)

// runUnfenced is the same worker without fencekit: client-go's leaderelection on a Lease and a plain
// ConfigMap as the target. It is what the demo's control run shows: nothing stops a paused former leader's
// write from overwriting the new leader's.
func runUnfenced(ctx context.Context, cfg *rest.Config, o options) error {
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.elector.Namespace, Name: o.elector.Name},
		Client:     clientset.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.elector.Identity},
	}
	// Like most programs, this one lets in-flight work finish before it exits.
	var inflight sync.WaitGroup
	defer inflight.Wait()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: o.elector.LeaseDuration, RenewDeadline: o.elector.RenewDeadline, RetryPeriod: o.elector.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				inflight.Add(1)
				defer inflight.Done()
				workUnfenced(ctx, clientset, o)
			},
			OnStoppedLeading: func() {},
			OnNewLeader:      func(identity string) { log.Info("new leader", "holder", identity) },
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	return nil
}

func workUnfenced(ctx context.Context, cs kubernetes.Interface, o options) {
	log.Info("leading", "holder", o.elector.Identity)
	defer log.Info("stopped leading", "holder", o.elector.Identity)
	for n := 1; o.writes == 0 || n <= o.writes; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(o.interval):
		}
		pauseHere(n, o.stopBeforeWrite, o.elector.Identity, 0)
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := writeConfigMap(wctx, cs, o, map[string]string{"writer": o.elector.Identity, "write": strconv.Itoa(n)})
		cancel()
		if err != nil {
			log.Info("write", "holder", o.elector.Identity, "write", n, "accepted", false, "error", err.Error())
			continue
		}
		log.Info("write", "holder", o.elector.Identity, "write", n, "accepted", true)
	}
}

// writeConfigMap replaces the ConfigMap's data, creating it if needed: a careful read-modify-write that
// retries resourceVersion conflicts, and still has no idea whether its writer is the current leader.
func writeConfigMap(ctx context.Context, cs kubernetes.Interface, o options, data map[string]string) error {
	cms := cs.CoreV1().ConfigMaps(o.elector.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, o.resource, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: o.resource, Namespace: o.elector.Namespace}, Data: data}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cm.Data = data
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
}
