package fencing_test

import (
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// TestRefusedBy tells the webhook's refusals from the CRD rule's, and ignores what the apiserver did not
// refuse for fencing.
func TestRefusedBy(t *testing.T) {
	crdRule := apierrors.NewInvalid(schema.GroupKind{Group: "fencing.fencekit.io", Kind: "FencedResource"}, "orders", nil)
	crdRule.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseType("FieldValueForbidden"), Field: "spec.epoch",
		Message: "Forbidden: stale epoch 4: this FencedResource has already admitted epoch 5"}}
	webhook := (&fencing.Error{Reason: protocol.ReasonNotHolder, Message: "not the holder"}).StatusError()
	tests := map[string]struct {
		err       error
		mechanism string
		reason    protocol.Reason
	}{
		"webhook refusal":          {webhook, fencing.MechanismWebhook, protocol.ReasonNotHolder},
		"webhook refusal, wrapped": {errors.Join(errors.New("writing"), webhook), fencing.MechanismWebhook, protocol.ReasonNotHolder},
		"CRD rule":                 {crdRule, fencing.MechanismCRDRule, protocol.ReasonStale},
		"raised by the writer":     {&fencing.Error{Reason: protocol.ReasonNotHolder}, "", ""},
		"conflict":                 {apierrors.NewConflict(schema.GroupResource{}, "orders", errors.New("changed")), "", ""},
		"forbidden by RBAC":        {apierrors.NewForbidden(schema.GroupResource{}, "orders", errors.New("rbac")), "", ""},
		"no error":                 {nil, "", ""},
		"timeout":                  {apierrors.NewGenericServerResponse(http.StatusGatewayTimeout, "PATCH", schema.GroupResource{}, "orders", "", 0, true), "", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, r := fencing.RefusedBy(tc.err)
			if m != tc.mechanism || r != tc.reason {
				t.Errorf("RefusedBy = %q, %q; want %q, %q", m, r, tc.mechanism, tc.reason)
			}
		})
	}
}
