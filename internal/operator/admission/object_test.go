package admission_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// configMap is ConfigMap ns/app with data v, the epoch record epoch ("" for none) and extra annotations.
func configMap(v, epoch string, mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "ns", "name": "app", "resourceVersion": "7"},
		"data":     map[string]any{"v": v},
	}}
	if epoch != "" {
		u.SetAnnotations(map[string]string{fencingv1alpha1.ObjectEpochAnnotation: epoch})
	}
	for _, m := range mutate {
		m(u)
	}
	return u
}

func write(old, updated *unstructured.Unstructured, sub string) objectWrite {
	return objectWrite{sub: sub, old: old, updated: updated}
}

func presenting(r requester, epoch int64) requester {
	r.FieldManager = protocol.FieldManagerFor(epoch)
	return r
}

func TestObjectWrite(t *testing.T) {
	kcm := requester{Username: "system:serviceaccount:kube-system:deployment-controller"}
	kubelet := requester{Username: "system:node:n1", Groups: []string{"system:nodes"}}
	gc := requester{Username: admission.GarbageCollectorUser}
	admin := requester{Username: "oncall", Groups: []string{admission.BreakGlassGroup}}
	owned := func(u *unstructured.Unstructured) {
		u.SetOwnerReferences([]metav1.OwnerReference{ghostOwner, otherOwner})
	}
	orphaned := func(u *unstructured.Unstructured) { u.SetOwnerReferences([]metav1.OwnerReference{otherOwner}) }
	withStatus := func(v string) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) { u.Object["status"] = map[string]any{"v": v} }
	}
	marked := func(m string) func(*unstructured.Unstructured) {
		return func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a[fencingv1alpha1.DeleteAtEpochAnnotation] = m
			u.SetAnnotations(a)
		}
	}
	tests := map[string]struct {
		w     objectWrite
		req   requester
		lease string
		want  protocol.Reason
	}{
		"the holder, stamped":                 {write(configMap("a", "4"), configMap("b", "5"), ""), presenting(holderUser, 5), "5", ""},
		"the holder creates":                  {write(nil, configMap("b", "5"), ""), presenting(holderUser, 5), "5", ""},
		"no token":                            {write(configMap("a", "5"), configMap("b", "5"), ""), holderUser, "5", protocol.ReasonTokenMissing},
		"a stale token":                       {write(configMap("a", "4"), configMap("b", "4"), ""), presenting(holderUser, 4), "5", protocol.ReasonStale},
		"a future token":                      {write(configMap("a", "4"), configMap("b", "6"), ""), presenting(holderUser, 6), "5", protocol.ReasonFutureEpoch},
		"another user with the current token": {write(configMap("a", "4"), configMap("b", "5"), ""), presenting(otherUser, 5), "5", protocol.ReasonNotHolder},
		"the record inherited from storage":   {write(configMap("a", "4"), configMap("b", "4"), ""), presenting(holderUser, 5), "5", protocol.ReasonInvalid},
		"the record other than the token":     {write(configMap("a", "4"), configMap("b", "9"), ""), presenting(holderUser, 5), "5", protocol.ReasonInvalid},
		// A record above the Lease's current epoch (read on a quorum read) was never issued by the Lease: anyone
		// could write it before a policy covered the object. The holder's write replaces it (no lock-out).
		"a record above the Lease's epoch, replaced by the holder": {write(configMap("a", "9"), configMap("b", "5"), ""), presenting(holderUser, 5), "5", ""},
		"a released Lease":                 {write(configMap("a", "4"), configMap("b", "5"), ""), presenting(holderUser, 5), "released", protocol.ReasonNotHolder},
		"no Lease":                         {write(configMap("a", "4"), configMap("b", "5"), ""), presenting(holderUser, 5), "", protocol.ReasonLeaseMissing},
		"a malformed token":                {write(configMap("a", "4"), configMap("b", "5"), ""), requester{Username: "worker-b-user", FieldManager: protocol.FieldManagerPrefix + "05"}, "5", protocol.ReasonInvalid},
		"break-glass presents the token":   {write(configMap("a", "4"), configMap("b", "5"), ""), presenting(admin, 5), "5", ""},
		"break-glass without a token":      {write(configMap("a", "4"), configMap("b", "4"), ""), admin, "5", protocol.ReasonTokenMissing},
		"a finalizer without a token":      {write(configMap("a", "4"), configMap("a", "4", func(u *unstructured.Unstructured) { u.SetFinalizers([]string{"x"}) }), ""), otherUser, "5", ""},
		"kube-controller-manager's status": {write(configMap("a", "4", withStatus("1")), configMap("a", "4", withStatus("2")), "status"), kcm, "5", ""},
		"a kubelet's status":               {write(configMap("a", "4", withStatus("1")), configMap("a", "4", withStatus("2")), "status"), kubelet, "5", ""},
		"kube-controller-manager's status that moves the record": {write(configMap("a", "4", withStatus("1")), configMap("a", "9", withStatus("2")), "status"), kcm, "5", protocol.ReasonTokenMissing},
		"kube-controller-manager's spec":                         {write(configMap("a", "4"), configMap("b", "4"), ""), kcm, "5", protocol.ReasonTokenMissing},
		"another user's status":                                  {write(configMap("a", "4", withStatus("1")), configMap("a", "4", withStatus("2")), "status"), otherUser, "5", protocol.ReasonTokenMissing},
		"the holder's status, record kept":                       {write(configMap("a", "4", withStatus("1")), configMap("a", "4", withStatus("2")), "status"), presenting(holderUser, 5), "5", ""},
		"a stale status":                                         {write(configMap("a", "4", withStatus("1")), configMap("a", "4", withStatus("2")), "status"), presenting(holderUser, 4), "5", protocol.ReasonStale},
		"the garbage collector orphans":                          {write(configMap("a", "4", owned), configMap("a", "4", orphaned), ""), gc, "5", ""},
		"the garbage collector adds an owner":                    {write(configMap("a", "4", orphaned), configMap("a", "4", owned), ""), gc, "5", protocol.ReasonTokenMissing},
		"a deletion marker at the token":                         {write(configMap("a", "4"), configMap("a", "5", marked("5")), ""), presenting(holderUser, 5), "5", ""},
		"a deletion marker other than the token":                 {write(configMap("a", "4"), configMap("a", "5", marked("7")), ""), presenting(holderUser, 5), "5", protocol.ReasonInvalid},
		"a stale scale":                                          {write(configMap("a", ""), configMap("b", ""), "scale"), presenting(holderUser, 4), "5", protocol.ReasonStale},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lease := leaseAt(tc.lease)
			switch tc.lease {
			case "":
				lease = nil
			case "released":
				lease = leaseAt("5", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") })
			}
			wantReason(t, checkObjectWrite(tc.w, lease, tc.req), tc.want)
		})
	}
}

// wantReason fails t unless err, the decision on a request, refuses with reason want ("": admits).
func wantReason(t *testing.T, err *fencing.Error, want protocol.Reason) {
	t.Helper()
	var got protocol.Reason
	if err != nil {
		got = err.Reason
	}
	if got != want {
		t.Errorf("Decide = %q (%v), want %q", got, err, want)
	}
}

func TestObjectDelete(t *testing.T) {
	marked := func(m string) *unstructured.Unstructured {
		u := configMap("a", "5")
		a := u.GetAnnotations()
		a[fencingv1alpha1.DeleteAtEpochAnnotation] = m
		u.SetAnnotations(a)
		return u
	}
	tests := map[string]struct {
		old  *unstructured.Unstructured
		req  requester
		want protocol.Reason
	}{
		"the holder, marker at the current epoch": {marked("5"), holderUser, ""},
		"the holder's user, no marker":            {configMap("a", "5"), holderUser, protocol.ReasonTokenMissing},
		"the holder's user, a stale marker":       {marked("4"), holderUser, protocol.ReasonStale},
		"another user":                            {marked("5"), otherUser, protocol.ReasonNotHolder},
		"break-glass":                             {configMap("a", "5"), requester{Username: "oncall", Groups: []string{"system:masters"}}, ""},
		"the garbage collector, a dependent": {configMap("a", "5", func(u *unstructured.Unstructured) {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "u1"}})
		}), requester{Username: admission.GarbageCollectorUser}, ""},
		"the garbage collector, no owners": {configMap("a", "5"), requester{Username: admission.GarbageCollectorUser}, protocol.ReasonNotHolder},
		"completing an admitted deletion": {configMap("a", "5", func(u *unstructured.Unstructured) {
			ts := metav1.NewTime(now)
			u.SetDeletionTimestamp(&ts)
		}), otherUser, ""},
		"a kube-system controller deleting a ConfigMap": {configMap("a", "5"), requester{Username: "system:serviceaccount:kube-system:pod-garbage-collector"}, protocol.ReasonNotHolder},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			wantReason(t, checkObjectDelete(tc.old, leaseAt("5"), tc.req), tc.want)
		})
	}
}

func TestValidatePolicy(t *testing.T) {
	sel := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"tier": v}}
	}
	policy := func(name, lease string, entries ...fencingv1alpha1.FencedObjects) fencingv1alpha1.FencingPolicy {
		return fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: entries}}
	}
	known := func(group, resource string) (bool, bool, error) {
		switch group + "/" + resource {
		case "/configmaps", "apps/deployments":
			return true, true, nil
		case "networking.k8s.io/ingressclasses":
			return true, false, nil
		}
		return false, false, nil
	}
	existing := []fencingv1alpha1.FencingPolicy{policy("a", "lease-a", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: sel("a")})}
	tests := map[string]struct {
		p    fencingv1alpha1.FencingPolicy
		want []field.ErrorType
	}{
		"valid":                        {policy("b", "lease-a", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"}), nil},
		"same resource, same Lease":    {policy("b", "lease-a", fencingv1alpha1.FencedObjects{Resource: "configmaps"}), nil},
		"same resource, another Lease": {policy("b", "lease-b", fencingv1alpha1.FencedObjects{Resource: "configmaps"}), []field.ErrorType{field.ErrorTypeForbidden}},
		"disjoint selectors":           {policy("b", "lease-b", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: sel("b")}), nil},
		"the same policy, updated":     {policy("a", "lease-b", fencingv1alpha1.FencedObjects{Resource: "configmaps"}), nil},
		"unknown":                      {policy("b", "lease-a", fencingv1alpha1.FencedObjects{Group: "example.com", Resource: "widgets"}), []field.ErrorType{field.ErrorTypeNotFound}},
		"cluster-scoped":               {policy("b", "lease-a", fencingv1alpha1.FencedObjects{Group: "networking.k8s.io", Resource: "ingressclasses"}), []field.ErrorType{field.ErrorTypeInvalid}},
		"an invalid selector":          {policy("b", "lease-a", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}}), []field.ErrorType{field.ErrorTypeInvalid}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []field.ErrorType
			for _, e := range admission.ValidatePolicy(&tc.p, existing, known) {
				got = append(got, e.Type)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ValidatePolicy (-want +got):\n%s", diff)
			}
		})
	}
	ks := policy("b", "lease-a", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	ks.Namespace = "kube-system"
	if errs := admission.ValidatePolicy(&ks, nil, known); len(errs) != 1 || errs[0].Field != "metadata.namespace" {
		t.Errorf("a policy in kube-system: %v, want one error on metadata.namespace", errs)
	}
}
