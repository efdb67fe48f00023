package main

import (
	"context"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/fencekit/fencekit/test/chaos"
)

// runUnfenced is the negative control: client-go's leaderelection on a Lease and a ConfigMap written with a
// careful read-modify-write. The epoch it records (and stores in the data) is the Lease's
// leaseTransitions when it started leading: client-go's nearest thing to a term.
func (w *worker) runUnfenced(ctx context.Context, cs kubernetes.Interface, c client.Client) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: w.o.Namespace, Name: w.o.Lease},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: w.o.Identity},
	}
	var le *leaderelection.LeaderElector
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: w.o.LeaseDuration, RenewDeadline: w.o.RenewDeadline, RetryPeriod: w.o.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { w.writeUnfenced(ctx, cs, c, le) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return err
	}
	go w.readLoop(ctx, func(ctx context.Context) (*chaos.Value, error) { return w.readConfigMap(ctx, cs) })
	le.Run(ctx)
	return nil
}

func (w *worker) writeUnfenced(ctx context.Context, cs kubernetes.Interface, c client.Client, le *leaderelection.LeaderElector) {
	lease, err := cs.CoordinationV1().Leases(w.o.Namespace).Get(ctx, w.o.Lease, metav1.GetOptions{})
	if err != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != w.o.Identity {
		return
	}
	term := termOf(lease)
	w.writeLoop(ctx, le.IsLeader, func() {
		w.pauseIfArmed()
		id := w.nextOp()
		done := w.call(chaos.Record{Op: id, Kind: chaos.KindWrite, Epoch: term, BelievedLeader: true})
		wctx, cancel := context.WithTimeout(context.Background(), w.o.RequestTimeout)
		err := w.writeConfigMap(wctx, c, map[string]string{"op": id, "writer": w.o.Identity, "epoch": strconv.FormatInt(term, 10)})
		cancel()
		done(err, nil)
	})
}

// termOf is leaseTransitions + 1: client-go adds one with every change of holder.
func termOf(l *coordinationv1.Lease) int64 { return int64(ptr.Deref(l.Spec.LeaseTransitions, 0)) + 1 }

// writeConfigMap replaces the ConfigMap's data, creating it if needed (controllerutil.CreateOrUpdate: a
// read-modify-write), retrying resourceVersion conflicts.
func (w *worker) writeConfigMap(ctx context.Context, c client.Client, data map[string]string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.o.Target, Namespace: w.o.Namespace}}
		_, err := controllerutil.CreateOrUpdate(ctx, c, cm, func() error { cm.Data = data; return nil })
		return err
	})
}

func (w *worker) readConfigMap(ctx context.Context, cs kubernetes.Interface) (*chaos.Value, error) {
	cm, err := cs.CoreV1().ConfigMaps(w.o.Namespace).Get(ctx, w.o.Target, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &chaos.Value{}, nil
	}
	if err != nil {
		return nil, err
	}
	v := chaos.ConfigMapValue(cm)
	return &v, nil
}
