package cluster

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/test/util/testenv"
)

// FencedLabel is the label of the ConfigMaps the tests' policies select.
var FencedLabel = map[string]string{"app": "fenced"}

// FencedConfigMap is a ConfigMap with FencedLabel.
func FencedConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: FencedLabel}, Data: map[string]string{"v": "1"}}
}

// ReplicaSets are the ReplicaSets of d's namespace that d controls, by revision annotation.
func ReplicaSets(t *testing.T, env *testenv.Env, d *appsv1.Deployment) map[string]appsv1.ReplicaSet {
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

// RolledOut waits until the deployment controller has rolled out revision of the Deployment key at
// replicas: a ReplicaSet of that revision, status.observedGeneration at the generation, the revision
// annotation (which 1.37 writes through deployments/status) and status.updatedReplicas; it returns the
// Deployment as last read.
func RolledOut(t *testing.T, env *testenv.Env, key types.NamespacedName, revision string, replicas int32) appsv1.Deployment {
	t.Helper()
	got := EventuallyObject(t, env, 60*time.Second, key, fmt.Sprintf("Deployment %s rolls out revision %s at %d replicas", key.Name, revision, replicas), func(got *appsv1.Deployment) (bool, string) {
		rss := ReplicaSets(t, env, got)
		_, ok := rss[revision]
		s := fmt.Sprintf("generation %d, observedGeneration %d, revision %q, updatedReplicas %d, %d ReplicaSets",
			got.Generation, got.Status.ObservedGeneration, got.Annotations["deployment.kubernetes.io/revision"], got.Status.UpdatedReplicas, len(rss))
		return ok && got.Status.ObservedGeneration == got.Generation && got.Annotations["deployment.kubernetes.io/revision"] == revision &&
			got.Status.UpdatedReplicas == replicas, s
	})
	return *got
}

// EventuallyObject reads the object at key, for up to within, until ok accepts it (ok says what it saw, for
// the failure message), and returns it as last read.
func EventuallyObject[T any, P interface {
	*T
	client.Object
}](t *testing.T, env *testenv.Env, within time.Duration, key client.ObjectKey, what string, ok func(P) (bool, string)) P {
	t.Helper()
	var got P
	testenv.EventuallyWithin(t, within, what, func() (bool, string) {
		got = P(new(T))
		if err := env.Client.Get(t.Context(), key, got); err != nil {
			return false, err.Error()
		}
		return ok(got)
	})
	return got
}
