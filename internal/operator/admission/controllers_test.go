package admission_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// TestClusterControllers: the writes of the cluster's own controllers the rule lets through without a
// token, each under its ServiceAccount and under kube-controller-manager's one credential; and the
// neighbouring writes it refuses, which is what a stale holder or a user could try with them.
func TestClusterControllers(t *testing.T) {
	obj := func(kind string, fields map[string]any) *unstructured.Unstructured {
		u := map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"namespace": "ns", "name": "x",
			"annotations": map[string]any{fencingv1alpha1.ObjectEpochAnnotation: "5"}}}
		for k, v := range fields {
			u[k] = v
		}
		return &unstructured.Unstructured{Object: u}
	}
	claim := func(volume string, ann map[string]any) *unstructured.Unstructured {
		u := obj("PersistentVolumeClaim", map[string]any{"spec": map[string]any{"volumeName": volume, "storageClassName": "manual"}})
		a := u.GetAnnotations()
		for k, v := range ann {
			a[k] = v.(string)
		}
		u.SetAnnotations(a)
		return u
	}
	secret := func(typ, token string) *unstructured.Unstructured {
		d := map[string]any{}
		if token != "" {
			d["token"] = token
		}
		return obj("Secret", map[string]any{"type": typ, "data": d})
	}
	job := func(ttl bool, finished string) *unstructured.Unstructured {
		spec := map[string]any{}
		if ttl {
			spec["ttlSecondsAfterFinished"] = int64(0)
		}
		status := map[string]any{}
		if finished != "" {
			status["conditions"] = []any{map[string]any{"type": finished, "status": "True"}}
		}
		return obj("Job", map[string]any{"spec": spec, "status": status})
	}
	bound := map[string]any{"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
	pod := func(node string) *unstructured.Unstructured {
		return obj("Pod", map[string]any{"spec": map[string]any{"nodeName": node}, "status": map[string]any{"phase": "Running"}})
	}
	// controlled is an unscheduled Pod that an object of apiVersion and kind controls (controller false:
	// only owned).
	controlled := func(apiVersion, kind string, controller bool) *unstructured.Unstructured {
		u := pod("")
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "u", Controller: &controller}})
		return u
	}
	podStatus := func(phase string) *unstructured.Unstructured {
		return obj("Pod", map[string]any{"status": map[string]any{"phase": phase}})
	}
	budget := func(allowed int64, disrupted map[string]any, maxUnavailable int64) *unstructured.Unstructured {
		status := map[string]any{"disruptionsAllowed": allowed}
		if disrupted != nil {
			status["disruptedPods"] = disrupted
		}
		return obj("PodDisruptionBudget", map[string]any{"spec": map[string]any{"maxUnavailable": maxUnavailable}, "status": status})
	}
	withCondition := func(u *unstructured.Unstructured, kind string) *unstructured.Unstructured {
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": kind, "status": "False", "reason": "InsufficientPods"}}, "status", "conditions")
		return u
	}
	const at = "2026-12-03T12:00:00Z"
	const addon = "system:serviceaccount:kube-system:some-addon"
	tests := map[string]struct {
		user     string
		op       admission.Operation
		old, new *unstructured.Unstructured
		want     protocol.Reason
	}{
		"the volume binder binds a claim":                                               {admission.VolumeBinderUser, admission.Update, claim("", nil), claim("pv-1", bound), ""},
		"kube-controller-manager (one credential) binds":                                {admission.ControllerManagerUser, admission.Update, claim("", nil), claim("pv-1", bound), ""},
		"the volume binder rebinds a bound claim":                                       {admission.VolumeBinderUser, admission.Update, claim("pv-1", bound), claim("pv-2", bound), protocol.ReasonTokenMissing},
		"the volume binder changes the claim's class":                                   {admission.VolumeBinderUser, admission.Update, claim("", nil), obj("PersistentVolumeClaim", map[string]any{"spec": map[string]any{"storageClassName": "fast"}}), protocol.ReasonTokenMissing},
		"another kube-system controller binds a claim":                                  {admission.ReplicaSetCtrlUser, admission.Update, claim("", nil), claim("pv-1", bound), protocol.ReasonTokenMissing},
		"a user binds a claim":                                                          {"jane", admission.Update, claim("", nil), claim("pv-1", bound), protocol.ReasonTokenMissing},
		"the token controller fills a token Secret":                                     {admission.TokenControllerUser, admission.Update, secret("kubernetes.io/service-account-token", ""), secret("kubernetes.io/service-account-token", "dG9r"), ""},
		"kube-controller-manager fills a token Secret":                                  {admission.ControllerManagerUser, admission.Update, secret("kubernetes.io/service-account-token", ""), secret("kubernetes.io/service-account-token", "dG9r"), ""},
		"the token controller writes an Opaque Secret":                                  {admission.TokenControllerUser, admission.Update, secret("Opaque", ""), secret("Opaque", "dG9r"), protocol.ReasonTokenMissing},
		"a user fills a token Secret":                                                   {"jane", admission.Update, secret("kubernetes.io/service-account-token", ""), secret("kubernetes.io/service-account-token", "dG9r"), protocol.ReasonTokenMissing},
		"the token controller deletes a token Secret":                                   {admission.TokenControllerUser, admission.Delete, secret("kubernetes.io/service-account-token", "dG9r"), nil, ""},
		"the token controller deletes an Opaque Secret":                                 {admission.TokenControllerUser, admission.Delete, secret("Opaque", "dG9r"), nil, protocol.ReasonNotHolder},
		"a user deletes a token Secret":                                                 {"jane", admission.Delete, secret("kubernetes.io/service-account-token", "dG9r"), nil, protocol.ReasonNotHolder},
		"the scheduler selects a claim's node":                                          {admission.SchedulerUser, admission.Update, claim("", nil), claim("", map[string]any{"volume.kubernetes.io/selected-node": "node-1"}), ""},
		"the scheduler changes a claim's class":                                         {admission.SchedulerUser, admission.Update, claim("", nil), obj("PersistentVolumeClaim", map[string]any{"spec": map[string]any{"storageClassName": "fast"}}), protocol.ReasonTokenMissing},
		"a user selects a claim's node":                                                 {"jane", admission.Update, claim("", nil), claim("", map[string]any{"volume.kubernetes.io/selected-node": "node-1"}), protocol.ReasonTokenMissing},
		"the TTL controller deletes a finished Job":                                     {admission.TTLControllerUser, admission.Delete, job(true, "Complete"), nil, ""},
		"the TTL controller deletes a failed Job":                                       {admission.TTLControllerUser, admission.Delete, job(true, "Failed"), nil, ""},
		"the TTL controller deletes a running Job":                                      {admission.TTLControllerUser, admission.Delete, job(true, ""), nil, protocol.ReasonNotHolder},
		"the TTL controller deletes a Job without a TTL":                                {admission.TTLControllerUser, admission.Delete, job(false, "Complete"), nil, protocol.ReasonNotHolder},
		"another kube-system controller deletes the Job":                                {admission.ReplicaSetCtrlUser, admission.Delete, job(true, "Complete"), nil, protocol.ReasonNotHolder},
		"kube-controller-manager (one credential) orphans":                              {admission.ControllerManagerUser, admission.Update, obj("ConfigMap", map[string]any{"metadata": map[string]any{"namespace": "ns", "name": "x", "annotations": map[string]any{fencingv1alpha1.ObjectEpochAnnotation: "5"}, "ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}}}}), obj("ConfigMap", nil), ""},
		"the ReplicaSet controller deletes its Pod":                                     {admission.ReplicaSetCtrlUser, admission.Delete, controlled("apps/v1", "ReplicaSet", true), nil, ""},
		"the ReplicaSet controller deletes a Pod a Job controls":                        {admission.ReplicaSetCtrlUser, admission.Delete, controlled("batch/v1", "Job", true), nil, protocol.ReasonNotHolder},
		"the ReplicaSet controller deletes a Pod it only owns":                          {admission.ReplicaSetCtrlUser, admission.Delete, controlled("apps/v1", "ReplicaSet", false), nil, protocol.ReasonNotHolder},
		"the ReplicaSet controller deletes a standalone Pod":                            {admission.ReplicaSetCtrlUser, admission.Delete, pod(""), nil, protocol.ReasonNotHolder},
		"the ReplicaSet controller deletes a node's standalone Pod":                     {admission.ReplicaSetCtrlUser, admission.Delete, pod("n1"), nil, protocol.ReasonNotHolder},
		"the Job controller deletes its Pod":                                            {"system:serviceaccount:kube-system:job-controller", admission.Delete, controlled("batch/v1", "Job", true), nil, ""},
		"the StatefulSet controller deletes a Pod another group's StatefulSet controls": {"system:serviceaccount:kube-system:statefulset-controller", admission.Delete, controlled("apps.kruise.io/v1beta1", "StatefulSet", true), nil, protocol.ReasonNotHolder},
		"the CronJob controller deletes a Pod a Job controls":                           {"system:serviceaccount:kube-system:cronjob-controller", admission.Delete, controlled("batch/v1", "Job", true), nil, protocol.ReasonNotHolder},
		"the Pod garbage collector deletes a node's Pod":                                {"system:serviceaccount:kube-system:pod-garbage-collector", admission.Delete, pod("n1"), nil, ""},
		"the Pod garbage collector deletes an unscheduled Pod":                          {"system:serviceaccount:kube-system:pod-garbage-collector", admission.Delete, pod(""), nil, protocol.ReasonNotHolder},
		"the scheduler preempts a Pod":                                                  {admission.SchedulerUser, admission.Delete, pod("n1"), nil, ""},
		"the scheduler deletes an unscheduled Pod":                                      {admission.SchedulerUser, admission.Delete, pod(""), nil, protocol.ReasonNotHolder},
		"kube-controller-manager (one credential) deletes a node's":                     {admission.ControllerManagerUser, admission.Delete, pod("n1"), nil, ""},
		"kube-controller-manager (one credential) deletes a RS's":                       {admission.ControllerManagerUser, admission.Delete, controlled("apps/v1", "ReplicaSet", true), nil, ""},
		"kube-controller-manager (one credential) deletes a lone":                       {admission.ControllerManagerUser, admission.Delete, pod(""), nil, protocol.ReasonNotHolder},
		"a controller that deletes no Pods deletes one":                                 {admission.DeploymentControllerUser, admission.Delete, pod("n1"), nil, protocol.ReasonNotHolder},
		"an add-on in kube-system deletes a Pod":                                        {addon, admission.Delete, pod("n1"), nil, protocol.ReasonNotHolder},
		"an add-on in kube-system writes a Pod's status":                                {addon, admission.Update, podStatus("Running"), podStatus("Failed"), protocol.ReasonTokenMissing},
		"the node controller writes a Pod's status":                                     {"system:serviceaccount:kube-system:node-controller", admission.Update, podStatus("Running"), podStatus("Failed"), ""},
		"the apiserver counts an eviction against a budget":                             {admission.APIServerUser, admission.Update, budget(1, nil, 1), budget(0, map[string]any{"web-0": at}, 1), ""},
		"the apiserver counts a second eviction":                                        {admission.APIServerUser, admission.Update, budget(2, map[string]any{"web-0": at}, 1), budget(1, map[string]any{"web-0": at, "web-1": at}, 1), ""},
		"the apiserver counts the last disruption":                                      {admission.APIServerUser, admission.Update, budget(1, nil, 1), withCondition(budget(0, map[string]any{"web-0": at}, 1), "DisruptionAllowed"), ""},
		"the apiserver changes a budget's spec":                                         {admission.APIServerUser, admission.Update, budget(1, nil, 1), budget(0, map[string]any{"web-0": at}, 3), protocol.ReasonTokenMissing},
		"the apiserver writes a quota's usage":                                          {admission.APIServerUser, admission.Update, obj("ResourceQuota", map[string]any{"status": map[string]any{"used": map[string]any{"count/configmaps": "1"}}}), obj("ResourceQuota", map[string]any{"status": map[string]any{"used": map[string]any{"count/configmaps": "2"}}}), ""},
		"a user writes a quota's usage":                                                 {"jane", admission.Update, obj("ResourceQuota", map[string]any{"status": map[string]any{"used": map[string]any{"count/configmaps": "1"}}}), obj("ResourceQuota", map[string]any{"status": map[string]any{"used": map[string]any{"count/configmaps": "2"}}}), protocol.ReasonTokenMissing},
		"a user counts an eviction against a budget":                                    {"jane", admission.Update, budget(1, nil, 1), budget(0, map[string]any{"web-0": at}, 1), protocol.ReasonTokenMissing},
		"an add-on in kube-system orphans":                                              {addon, admission.Update, obj("ConfigMap", map[string]any{"metadata": map[string]any{"namespace": "ns", "name": "x", "annotations": map[string]any{fencingv1alpha1.ObjectEpochAnnotation: "5"}, "ownerReferences": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}}}}), obj("ConfigMap", nil), protocol.ReasonTokenMissing},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kind := tc.old.GetKind()
			sub := ""
			if (kind == "Pod" || kind == "PodDisruptionBudget" || kind == "ResourceQuota") && tc.op == admission.Update {
				sub = "status"
			}
			r := &admission.Request{Class: admission.Object, Operation: tc.op, Subresource: sub, Kind: kind, Namespace: "ns", Name: "x", Policy: "ns/app",
				LeaseName: "orders-writer", User: admission.User{Name: tc.user}, Old: tc.old, New: tc.new, CoveredBefore: true, CoveredAfter: tc.new != nil}
			wantReason(t, decideOnQuorum(r, leaseAt("5")), tc.want)
		})
	}
}

// TestRefusedControllers: declaring a resource a cluster controller writes warns, naming the controller
// and what breaks.
func TestRefusedControllers(t *testing.T) {
	p := &fencingv1alpha1.FencingPolicy{}
	p.Namespace, p.Name = "ns", "app"
	p.Spec.Resources = []fencingv1alpha1.FencedObjects{{Resource: "configmaps"}, {Group: "apps", Resource: "replicasets"}, {Resource: "pods"}}
	got := admission.RefusedControllers(p)
	if len(got) != 2 {
		t.Fatalf("RefusedControllers = %q, want 2 warnings (replicasets, pods)", got)
	}
	for i, want := range []string{"FencingPolicy ns/app declares replicasets.apps: the Deployment controller", "FencingPolicy ns/app declares pods: the ReplicaSet, Job"} {
		if len(got[i]) < len(want) || got[i][:len(want)] != want {
			t.Errorf("warning %d = %q, want it to start %q", i, got[i], want)
		}
	}
}

// TestControllerDeletesLeaveTheDependents: a cluster controller admitted to delete an object decides that
// it goes, not what becomes of what it owns (I4): the same DELETE with options that orphan the dependents
// is refused, naming the options; a kubelet deletes and binds only on its own node.
func TestControllerDeletesLeaveTheDependents(t *testing.T) {
	obj := func(kind, node string, owned bool) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind, "metadata": map[string]any{"namespace": "ns", "name": "x",
			"annotations": map[string]any{fencingv1alpha1.ObjectEpochAnnotation: "5"}}, "spec": map[string]any{"nodeName": node}}}
		if owned {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "o", UID: "u"}})
		}
		return u
	}
	orphan, background, foreground := "Orphan", "Background", "Foreground"
	yes := true
	kubelet := func(node string) admission.User {
		return admission.User{Name: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	}
	tests := map[string]struct {
		user admission.User
		old  *unstructured.Unstructured
		opts admission.DeleteOptions
		want protocol.Reason
	}{
		"the node controller deletes a node's Pod":                   {admission.User{Name: "system:serviceaccount:kube-system:node-controller"}, obj("Pod", "n1", false), admission.DeleteOptions{}, ""},
		"the node controller orphans a node's Pod's dependents":      {admission.User{Name: "system:serviceaccount:kube-system:node-controller"}, obj("Pod", "n1", false), admission.DeleteOptions{PropagationPolicy: &orphan}, protocol.ReasonNotHolder},
		"the node controller deletes in the foreground":              {admission.User{Name: "system:serviceaccount:kube-system:node-controller"}, obj("Pod", "n1", false), admission.DeleteOptions{PropagationPolicy: &foreground}, ""},
		"a kubelet deletes its own node's Pod":                       {kubelet("n1"), obj("Pod", "n1", false), admission.DeleteOptions{}, ""},
		"a kubelet orphans its Pod's dependents":                     {kubelet("n1"), obj("Pod", "n1", false), admission.DeleteOptions{OrphanDependents: &yes}, protocol.ReasonNotHolder},
		"a kubelet deletes another node's Pod":                       {kubelet("n2"), obj("Pod", "n1", false), admission.DeleteOptions{}, protocol.ReasonNotHolder},
		"the garbage collector deletes a dependent":                  {admission.User{Name: admission.GarbageCollectorUser}, obj("ConfigMap", "", true), admission.DeleteOptions{PropagationPolicy: &background}, ""},
		"the garbage collector orphans a dependent's dependents":     {admission.User{Name: admission.GarbageCollectorUser}, obj("ConfigMap", "", true), admission.DeleteOptions{PropagationPolicy: &orphan}, protocol.ReasonNotHolder},
		"the garbage collector deletes in the foreground":            {admission.User{Name: admission.GarbageCollectorUser}, obj("ConfigMap", "", true), admission.DeleteOptions{PropagationPolicy: &foreground}, ""},
		"a default that orphans is the resource's, not the delete's": {admission.User{Name: admission.GarbageCollectorUser}, obj("ConfigMap", "", true), admission.DeleteOptions{DefaultOrphans: true}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := &admission.Request{Class: admission.Object, Operation: admission.Delete, Kind: tc.old.GetKind(), Namespace: "ns", Name: "x", Policy: "ns/app",
				LeaseName: "orders-writer", User: tc.user, Old: tc.old, CoveredBefore: true, DeleteOptions: tc.opts}
			wantReason(t, decideOnQuorum(r, leaseAt("5")), tc.want)
		})
	}
}
