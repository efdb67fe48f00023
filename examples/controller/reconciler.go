package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/fencekit/fencekit/pkg/fencing"
)

const (
	// SourceLabel marks the ConfigMaps this operator renders.
	SourceLabel = "example.fencekit.io/source"
	// RenderedLabel marks the ConfigMaps it writes (the FencingPolicy fences these, not the sources).
	RenderedLabel = "example.fencekit.io/rendered"
)

// Reconciler renders a source ConfigMap (data: message, replicas, canary, round) into:
//   - the ConfigMap <source>-rendered (an unconditional Update of the desired object);
//   - the Deployment <source> (created, then merge-patched: replicas and the round annotation);
//   - a condition Rendered in that Deployment's status (a status patch; it stands for the status of your
//     own custom resource);
//   - the Deployment <source>-canary, which exists while canary is "true" and is deleted otherwise.
//
// It is an ordinary kubebuilder reconciler: nothing in it knows about fencing. The writes of one round
// run concurrently and each is logged ("write", op, accepted, reason).
type Reconciler struct {
	Client client.Client
}

// SetupWithManager watches the source ConfigMaps.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[SourceLabel] == "true"
		}))).
		Named("configsync").
		Complete(r)
}

// Reconcile renders one source.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var src corev1.ConfigMap
	if err := r.Client.Get(ctx, req.NamespacedName, &src); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	round := src.Data["round"]
	ctx = withRound(ctx, round)
	replicas, _ := strconv.Atoi(src.Data["replicas"])
	// Read everything first, then write: the reads decide what the writes will be.
	dep, err := r.ensureDeployment(ctx, &src, src.Name, replicas)
	if err != nil {
		return ctrl.Result{}, err
	}
	var canary *appsv1.Deployment
	if src.Data["canary"] == "true" {
		if _, err := r.ensureDeployment(ctx, &src, src.Name+"-canary", 1); err != nil {
			return ctrl.Result{}, err
		}
	} else {
		var c appsv1.Deployment
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: src.Namespace, Name: src.Name + "-canary"}, &c); err == nil {
			canary = &c
		} else if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	var rendered corev1.ConfigMap
	renderedKey := types.NamespacedName{Namespace: src.Namespace, Name: src.Name + "-rendered"}
	if err := r.Client.Get(ctx, renderedKey, &rendered); apierrors.IsNotFound(err) {
		rendered = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: renderedKey.Name,
			Labels: map[string]string{RenderedLabel: "true"}}}
		if err := r.Client.Create(ctx, &rendered); err != nil {
			return ctrl.Result{}, err
		}
	} else if err != nil {
		return ctrl.Result{}, err
	}

	writes := map[string]func() error{
		// The desired ConfigMap as a whole, without a resourceVersion: an unconditional Update, which no
		// resourceVersion conflict can stop (only fencing does).
		"update": func() error {
			desired := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: rendered.Namespace, Name: rendered.Name, Labels: rendered.Labels},
				Data:       map[string]string{"message": src.Data["message"], "round": round},
			}
			return r.Client.Update(ctx, desired)
		},
		"patch": func() error {
			base := dep.DeepCopy()
			dep.Spec.Replicas = ptr.To(int32(replicas))
			metav1.SetMetaDataAnnotation(&dep.ObjectMeta, "example.fencekit.io/round", round)
			return r.Client.Patch(ctx, dep, client.MergeFrom(base))
		},
		"status": func() error {
			d := dep.DeepCopy()
			base := d.DeepCopy()
			setCondition(d, round)
			return r.Client.Status().Patch(ctx, d, client.MergeFrom(base))
		},
	}
	if canary != nil {
		writes["delete"] = func() error { return r.Client.Delete(ctx, canary) }
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(writes))
	for op, write := range writes {
		wg.Go(func() {
			err := write()
			logWrite(op, round, err)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

func (r *Reconciler) ensureDeployment(ctx context.Context, src *corev1.ConfigMap, name string, replicas int) (*appsv1.Deployment, error) {
	var d appsv1.Deployment
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: src.Namespace, Name: name}, &d)
	if !apierrors.IsNotFound(err) {
		return &d, err
	}
	labels := map[string]string{"app": name}
	d = appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if err := r.Client.Create(ctx, &d); err != nil {
		return nil, fmt.Errorf("creating Deployment %s: %w", name, err)
	}
	return &d, nil
}

func setCondition(d *appsv1.Deployment, round string) {
	c := appsv1.DeploymentCondition{Type: "Rendered", Status: corev1.ConditionTrue, Reason: "Round" + round,
		Message: "rendered round " + round, LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == c.Type {
			d.Status.Conditions[i] = c
			return
		}
	}
	d.Status.Conditions = append(d.Status.Conditions, c)
}

func logWrite(op, round string, err error) {
	switch err {
	case nil:
		log.Info("write", "op", op, "round", round, "accepted", true)
	default:
		log.Info("write", "op", op, "round", round, "accepted", false, "reason", string(fencing.ReasonOf(err)), "error", err.Error())
	}
}
