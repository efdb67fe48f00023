package onecredential

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/cluster"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestSingleCredential: with kube-controller-manager under one credential and a FencingPolicy declaring
// apps/deployments and the fenced ConfigMaps, the deployment controller writes the Deployment's status
// (observedGeneration, the revision annotation), the garbage collector completes orphan-mode deletions
// (the dependents stay, their owner references removed), and a stale holder is refused.
func TestSingleCredential(t *testing.T) {
	env.ControllerManager(t, testenv.SingleCredential())
	h := cluster.NewHolder(t, env, testenv.Deployment("", "probe"),
		[]rbacv1.PolicyRule{cluster.All("apps", "deployments", "deployments/status", "deployments/scale"), cluster.All("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: cluster.FencedLabel}})
	// Every controller writes as system:kube-controller-manager: none has a ServiceAccount of its own.
	err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: "kube-system", Name: "deployment-controller"}, &corev1.ServiceAccount{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("ServiceAccount kube-system/deployment-controller: %v, want none (one credential)", testenv.ErrString(err))
	}
	h.Acquire(t)
	d := testenv.Deployment("", "web")
	h.Create(t, d)

	t.Run("DeploymentStatus", func(t *testing.T) {
		cluster.RolledOut(t, env, client.ObjectKeyFromObject(d), "1", 1)
	})

	t.Run("OrphanDeletion", func(t *testing.T) {
		owner := cluster.FencedConfigMap("owner")
		h.Create(t, owner)
		var deps []client.Object
		for i := range 2 {
			dep := cluster.FencedConfigMap(fmt.Sprintf("dependent-%d", i))
			dep.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, BlockOwnerDeletion: ptr.To(true)}}
			h.Create(t, dep)
			deps = append(deps, dep)
		}
		// The Deployment too: its ReplicaSet is the dependent, the orphan finalizer is on the fenced owner.
		var rs appsv1.ReplicaSet
		for _, r := range cluster.ReplicaSets(t, env, d) {
			rs = r
		}
		if rs.Name == "" {
			t.Fatalf("Deployment %s has no ReplicaSet", d.Name)
		}
		deps = append(deps, &rs)
		for _, o := range []client.Object{owner, d} {
			if err := h.C.Delete(t.Context(), o, client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
				t.Fatalf("the holder's orphan delete of %T %s: %v", o, o.GetName(), err)
			}
			testenv.EventuallyWithin(t, 60*time.Second, o.GetName()+" is deleted", func() (bool, string) {
				got := o.DeepCopyObject().(client.Object)
				err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), got)
				if err == nil {
					return false, fmt.Sprintf("present, finalizers %v, deletionTimestamp %v", got.GetFinalizers(), got.GetDeletionTimestamp())
				}
				return apierrors.IsNotFound(err), err.Error()
			})
		}
		for _, dep := range deps {
			got := dep.DeepCopyObject().(client.Object)
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(dep), got); err != nil {
				t.Fatalf("orphaned dependent %T %s: %v", dep, dep.GetName(), err)
			}
			if refs := got.GetOwnerReferences(); len(refs) != 0 {
				t.Errorf("orphaned dependent %T %s still has owner references %v", dep, dep.GetName(), refs)
			}
		}
	})

	h.TakeOver(t, cluster.FencedConfigMap("dependent-0"))
}
