package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rbacv1 "k8s.io/api/rbac/v1"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/testenv"
	"github.com/fencekit/fencekit/pkg/fencing"
)

var fencedLabel = map[string]string{"app": "fenced"}

func deployment(name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

func fencedConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: fencedLabel}, Data: map[string]string{"v": "1"}}
}

// replicaSets are the ReplicaSets of ns that d owns, by revision annotation.
func replicaSets(t *testing.T, d *appsv1.Deployment) map[string]appsv1.ReplicaSet {
	t.Helper()
	var list appsv1.ReplicaSetList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(d.Namespace)); err != nil {
		t.Fatal(err)
	}
	byRevision := map[string]appsv1.ReplicaSet{}
	for _, rs := range list.Items {
		if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == d.UID {
			byRevision[rs.Annotations["deployment.kubernetes.io/revision"]] = rs
		}
	}
	return byRevision
}

// rolledOut waits until the deployment controller has rolled out revision of the Deployment key at
// replicas: a ReplicaSet of that revision, status.observedGeneration at the generation, the revision
// annotation (which 1.37 writes through deployments/status) and status.updatedReplicas; it returns the
// Deployment as last read.
func rolledOut(t *testing.T, key types.NamespacedName, revision string, replicas int32) appsv1.Deployment {
	t.Helper()
	var got appsv1.Deployment
	testenv.EventuallyWithin(t, 60*time.Second, fmt.Sprintf("Deployment %s rolls out revision %s at %d replicas", key.Name, revision, replicas), func() (bool, string) {
		if err := env.Client.Get(t.Context(), key, &got); err != nil {
			return false, err.Error()
		}
		rss := replicaSets(t, &got)
		_, ok := rss[revision]
		s := fmt.Sprintf("generation %d, observedGeneration %d, revision %q, updatedReplicas %d, %d ReplicaSets",
			got.Generation, got.Status.ObservedGeneration, got.Annotations["deployment.kubernetes.io/revision"], got.Status.UpdatedReplicas, len(rss))
		return ok && got.Status.ObservedGeneration == got.Generation && got.Annotations["deployment.kubernetes.io/revision"] == revision &&
			got.Status.UpdatedReplicas == replicas, s
	})
	return got
}

// TestDeploymentRollsOut: a Deployment declared in a FencingPolicy, written by the holder, is rolled out by
// the deployment controller as without fencekit: a ReplicaSet per template, status.observedGeneration,
// the revision annotation (which 1.37 writes through deployments/status).
func TestDeploymentRollsOut(t *testing.T) {
	h := newHolder(t, deployment("probe"), []rbacv1.PolicyRule{all("apps", "deployments", "deployments/status", "deployments/scale")},
		fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"})
	h.acquire(t)
	d := deployment("web")
	h.create(t, d)
	rolledOut(t, client.ObjectKeyFromObject(d), "1", 1)

	var live appsv1.Deployment
	if err := h.c.Get(t.Context(), client.ObjectKeyFromObject(d), &live); err != nil {
		t.Fatal(err)
	}
	live.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/pause:3.9"
	if err := h.c.Update(t.Context(), &live); err != nil {
		t.Fatalf("the holder's update of the template: %v", err)
	}
	rolledOut(t, client.ObjectKeyFromObject(d), "2", 1)
	h.takeOver(t, d)
}

// TestGarbageCollection: the garbage collector deletes the fenced dependents of a fenced owner that the
// holder deleted in background and foreground modes, and orphans them (removes their owner references)
// in orphan mode; the owner is gone in every mode.
func TestGarbageCollection(t *testing.T) {
	h := newHolder(t, fencedConfigMap("probe"), []rbacv1.PolicyRule{all("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: fencedLabel}})
	h.acquire(t)
	for _, mode := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		t.Run(string(mode), func(t *testing.T) {
			owner := fencedConfigMap("owner-" + strings.ToLower(string(mode)))
			h.create(t, owner)
			var deps []types.NamespacedName
			for i := range 2 {
				dep := fencedConfigMap(fmt.Sprintf("dependent-%s-%d", strings.ToLower(string(mode)), i))
				dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(true)}}
				h.create(t, dep)
				deps = append(deps, client.ObjectKeyFromObject(dep))
			}
			if err := h.c.Delete(t.Context(), owner, client.PropagationPolicy(mode)); err != nil {
				t.Fatalf("the holder's %s delete of the owner: %v", mode, err)
			}
			gone := func(key types.NamespacedName) {
				t.Helper()
				testenv.EventuallyWithin(t, 60*time.Second, key.Name+" is deleted", func() (bool, string) {
					var cm corev1.ConfigMap
					err := env.Client.Get(t.Context(), key, &cm)
					if err == nil {
						return false, fmt.Sprintf("present, finalizers %v, deletionTimestamp %v", cm.Finalizers, cm.DeletionTimestamp)
					}
					return apierrors.IsNotFound(err), err.Error()
				})
			}
			gone(client.ObjectKeyFromObject(owner))
			for _, key := range deps {
				if mode != metav1.DeletePropagationOrphan {
					gone(key)
					continue
				}
				var cm corev1.ConfigMap
				if err := env.Client.Get(t.Context(), key, &cm); err != nil {
					t.Fatalf("orphaned dependent %s: %v", key.Name, err)
				}
				if len(cm.OwnerReferences) != 0 {
					t.Errorf("orphaned dependent %s still has owner references %v", key.Name, cm.OwnerReferences)
				}
			}
		})
	}
	// An orphaned dependent stays fenced.
	h.takeOver(t, fencedConfigMap("dependent-orphan-0"))
}

// TestNamespaceTerminates: a namespace holding a FencedResource written at the holder's epoch, fenced
// ConfigMaps and a live Lease (taken over at the next epoch, its objects raised) finishes terminating: the
// namespace controller may empty it.
func TestNamespaceTerminates(t *testing.T) {
	h := newHolder(t, fencedConfigMap("probe"), []rbacv1.PolicyRule{all("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: fencedLabel}})
	key := env.Declare(t, h.ns, "orders", lease)
	h.acquire(t)
	for i := range 3 {
		h.create(t, fencedConfigMap(fmt.Sprintf("fenced-%d", i)))
	}
	if _, err := fencing.NewWriter(h.worker.Client).Set(t.Context(), h.token, key, map[string]any{"v": 1}); err != nil {
		t.Fatalf("the holder's write of FencedResource orders: %v", err)
	}
	h.takeOver(t, fencedConfigMap("fenced-0"))
	h.worker.Renew(t, h.token)
	start := time.Now()
	if err := env.Client.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyWithin(t, 90*time.Second, "namespace "+h.ns+" finishes terminating", func() (bool, string) {
		var ns corev1.Namespace
		err := env.Client.Get(t.Context(), types.NamespacedName{Name: h.ns}, &ns)
		if err == nil {
			return false, fmt.Sprintf("phase %s, conditions %v", ns.Status.Phase, ns.Status.Conditions)
		}
		return apierrors.IsNotFound(err), err.Error()
	})
	t.Logf("namespace %s terminated in %v", h.ns, time.Since(start).Round(100*time.Millisecond))
}
