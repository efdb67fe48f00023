package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrladmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// TestRegarding: the Event of a refused object write is recorded on the object (its UID when it exists);
// a create with generateName (no name yet) and a Scale or Eviction subresource (the request names another
// kind) get none, as a nil interface, so that report records nothing rather than dereferencing nil.
func TestRegarding(t *testing.T) {
	stored := &unstructured.Unstructured{}
	stored.SetUID(types.UID("uid-1"))
	request := func(name, sub string, kind metav1.GroupVersionKind) ctrladmission.Request {
		return ctrladmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{Name: name, Namespace: "ns", SubResource: sub, Kind: kind,
			Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}}}
	}
	deployment := metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	scale := metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
	tests := map[string]struct {
		req  ctrladmission.Request
		r    *admission.Request
		want runtime.Object
	}{
		"update": {request("web", "", deployment), &admission.Request{Namespace: "ns", Name: "web", Old: stored, New: stored},
			&corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web", UID: "uid-1"}},
		"status": {request("web", "status", deployment), &admission.Request{Namespace: "ns", Name: "web", Old: stored, New: stored},
			&corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web", UID: "uid-1"}},
		"create":               {request("web", "", deployment), &admission.Request{Namespace: "ns", Name: "web", New: &unstructured.Unstructured{}}, &corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"}},
		"create, generateName": {request("", "", deployment), &admission.Request{Namespace: "ns", Name: "web-*", New: &unstructured.Unstructured{}}, nil},
		"scale subresource":    {request("web", "scale", scale), &admission.Request{Namespace: "ns", Name: "web", Old: stored, New: stored}, nil},
		"an alias of a subresource": {request("web", "", metav1.GroupVersionKind{Version: "v1", Kind: "Binding"}),
			&admission.Request{Namespace: "ns", Name: "web", Subresource: "binding", New: stored}, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := regarding(tc.req, tc.r)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("regarding = %#v, want a nil interface", got)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("regarding (-want +got):\n%s", diff)
			}
		})
	}
	// report with no object records no Event and does not panic.
	rec := events.NewFakeRecorder(1)
	report(t.Context(), rec, request("", "", deployment), refusal{webhook: webhookObjects, regarding: regarding(request("web", "scale", scale), &admission.Request{Namespace: "ns", Name: "web"}),
		lease: "l", err: &fencing.Error{Reason: protocol.ReasonStale, Message: "stale"}})
	if len(rec.Events) != 0 {
		t.Errorf("an Event was recorded without an object: %s", <-rec.Events)
	}
}
