package admission

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The core API as kube-apiserver 1.37 lists it, cut to what decides aliases: bindings stands for
// pods/binding; pods/status and pods/ephemeralcontainers are Pods; pods/eviction has no top-level
// resource; componentstatuses-like resources that cannot be created and cluster-scoped ones are no aliases.
func TestAliasesFrom(t *testing.T) {
	lists := []*metav1.APIResourceList{{
		GroupVersion: "v1",
		APIResources: []metav1.APIResource{
			{Name: "bindings", Namespaced: true, Kind: "Binding", Verbs: []string{"create"}},
			{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: []string{"create", "delete", "get", "list", "patch", "update"}},
			{Name: "pods/binding", Namespaced: true, Kind: "Binding", Verbs: []string{"create"}},
			{Name: "pods/eviction", Namespaced: true, Group: "policy", Version: "v1", Kind: "Eviction", Verbs: []string{"create"}},
			{Name: "pods/status", Namespaced: true, Kind: "Pod", Verbs: []string{"get", "patch", "update"}},
			{Name: "pods/ephemeralcontainers", Namespaced: true, Kind: "Pod", Verbs: []string{"get", "patch", "update"}},
			{Name: "replicationcontrollers", Namespaced: true, Kind: "ReplicationController", Verbs: []string{"create"}},
			{Name: "replicationcontrollers/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: []string{"get", "patch", "update"}},
			{Name: "nodes", Namespaced: false, Kind: "Node", Verbs: []string{"create"}},
			{Name: "componentstatuses", Namespaced: false, Kind: "ComponentStatus", Verbs: []string{"get", "list"}},
		},
	}, {
		GroupVersion: "apps/v1",
		APIResources: []metav1.APIResource{
			{Name: "deployments", Namespaced: true, Kind: "Deployment", Verbs: []string{"create"}},
			{Name: "deployments/scale", Namespaced: true, Group: "autoscaling", Version: "v1", Kind: "Scale", Verbs: []string{"get", "patch", "update"}},
			{Name: "deployments/status", Namespaced: true, Kind: "Deployment", Verbs: []string{"get", "patch", "update"}},
		},
	}}
	pods := schema.GroupResource{Resource: "pods"}
	got := AliasesFrom(lists)
	want := Aliases{{Resource: "bindings"}: {Resource: pods, Subresource: "binding"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AliasesFrom (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"bindings"}, got.Of(pods)); diff != "" {
		t.Errorf("Of(pods) (-want +got):\n%s", diff)
	}
	if r := got.Resolve(schema.GroupResource{Resource: "bindings"}, ""); r != (Route{Resource: pods, Subresource: "binding"}) {
		t.Errorf("Resolve(bindings) = %+v, want pods/binding", r)
	}
	if r := got.Resolve(schema.GroupResource{Group: "apps", Resource: "deployments"}, "scale"); r.Subresource != "scale" || r.Resource.Resource != "deployments" {
		t.Errorf("Resolve(deployments/scale) = %+v, want itself", r)
	}
}
