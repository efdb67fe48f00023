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
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestDeploymentRollsOut: a Deployment declared in a FencingPolicy, written by the holder, is rolled out by
// the deployment controller as without fencekit: a ReplicaSet per template, status.observedGeneration,
// the revision annotation (which 1.37 writes through deployments/status).
func TestDeploymentRollsOut(t *testing.T) {
	h := NewHolder(t, env, testenv.Deployment("", "probe"), []rbacv1.PolicyRule{All("apps", "deployments", "deployments/status", "deployments/scale")},
		fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"})
	h.Acquire(t)
	d := testenv.Deployment("", "web")
	h.Create(t, d)
	RolledOut(t, env, client.ObjectKeyFromObject(d), "1", 1)

	var live appsv1.Deployment
	if err := h.C.Get(t.Context(), client.ObjectKeyFromObject(d), &live); err != nil {
		t.Fatal(err)
	}
	live.Spec.Template.Spec.Containers[0].Image = "registry.k8s.io/pause:3.9"
	if err := h.C.Update(t.Context(), &live); err != nil {
		t.Fatalf("the holder's update of the template: %v", err)
	}
	RolledOut(t, env, client.ObjectKeyFromObject(d), "2", 1)
	h.TakeOver(t, d)
}

// TestGarbageCollection: the garbage collector deletes the fenced dependents of a fenced owner that the
// holder deleted in background and foreground modes, and orphans them (removes their owner references)
// in orphan mode; the owner is gone in every mode.
func TestGarbageCollection(t *testing.T) {
	h := NewHolder(t, env, FencedConfigMap("probe"), []rbacv1.PolicyRule{All("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: FencedLabel}})
	h.Acquire(t)
	for _, mode := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan} {
		t.Run(string(mode), func(t *testing.T) {
			owner := FencedConfigMap("owner-" + strings.ToLower(string(mode)))
			h.Create(t, owner)
			var deps []types.NamespacedName
			for i := range 2 {
				dep := FencedConfigMap(fmt.Sprintf("dependent-%s-%d", strings.ToLower(string(mode)), i))
				dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(true)}}
				h.Create(t, dep)
				deps = append(deps, client.ObjectKeyFromObject(dep))
			}
			if err := h.C.Delete(t.Context(), owner, client.PropagationPolicy(mode)); err != nil {
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
	h.TakeOver(t, FencedConfigMap("dependent-orphan-0"))
}

// TestNamespaceTerminates: a namespace holding a FencedResource written at the holder's epoch, fenced
// ConfigMaps and a live Lease (taken over at the next epoch, its objects raised) finishes terminating: the
// namespace controller may empty it.
func TestNamespaceTerminates(t *testing.T) {
	h := NewHolder(t, env, FencedConfigMap("probe"), []rbacv1.PolicyRule{All("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: FencedLabel}})
	key := env.Declare(t, h.NS, "orders", AppLease)
	h.Acquire(t)
	for i := range 3 {
		h.Create(t, FencedConfigMap(fmt.Sprintf("fenced-%d", i)))
	}
	if _, err := fencing.NewWriter(h.Worker.Client).Set(t.Context(), h.Token, key, map[string]any{"v": 1}); err != nil {
		t.Fatalf("the holder's write of FencedResource orders: %v", err)
	}
	h.TakeOver(t, FencedConfigMap("fenced-0"))
	h.Worker.Renew(t, h.Token)
	start := time.Now()
	if err := env.Client.Delete(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.NS}}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyWithin(t, 90*time.Second, "namespace "+h.NS+" finishes terminating", func() (bool, string) {
		var ns corev1.Namespace
		err := env.Client.Get(t.Context(), types.NamespacedName{Name: h.NS}, &ns)
		if err == nil {
			return false, fmt.Sprintf("phase %s, conditions %v", ns.Status.Phase, ns.Status.Conditions)
		}
		return apierrors.IsNotFound(err), err.Error()
	})
	t.Logf("namespace %s terminated in %v", h.NS, time.Since(start).Round(100*time.Millisecond))
}
