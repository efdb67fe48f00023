package fencing_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// crdStaleEpoch is the error the apiserver returns when the CRD's own transition rule on spec.epoch refuses
// a write (no webhook involved): 422 Invalid, one cause on spec.epoch.
func crdStaleEpoch(epoch, admitted int64) error {
	return apierrors.NewInvalid(schema.GroupKind{Group: fencingv1alpha1.GroupVersion.Group, Kind: "FencedResource"}, "orders",
		field.ErrorList{field.Forbidden(field.NewPath("spec", "epoch"),
			fmt.Sprintf("%s %d: this FencedResource has already admitted epoch %d", fencingv1alpha1.StaleEpochMessage, epoch, admitted))})
}

func TestReasonOf(t *testing.T) {
	stale := refusal(protocol.ReasonStale, 5, 6, "stale epoch 5: lease orders-writer is at epoch 6, held by worker-b")
	notHolder := refusal(protocol.ReasonNotHolder, 6, 6, "not the holder")
	missing := refusal(protocol.ReasonLeaseMissing, 6, 0, "lease missing")
	future := refusal(protocol.ReasonFutureEpoch, 7, 6, "future")
	invalid := refusal(protocol.ReasonInvalid, 6, 0, "too big")
	noToken := at("spec.data", refusal(protocol.ReasonTokenMissing, 0, 0, "no token"))
	tests := map[string]struct {
		err  error
		want protocol.Reason
	}{
		"the webhook's token missing": {err: noToken.StatusError(), want: protocol.ReasonTokenMissing},
		"nil":                         {err: nil, want: ""},
		"a plain error":               {err: errors.New("connection refused"), want: ""},
		"a stale *Error":              {err: stale, want: protocol.ReasonStale},
		"a wrapped *Error":            {err: fmt.Errorf("writing FencedResource ns/orders: %w", notHolder), want: protocol.ReasonNotHolder},
		"the webhook's stale":         {err: stale.StatusError(), want: protocol.ReasonStale},
		"the webhook's not-holder":    {err: notHolder.StatusError(), want: protocol.ReasonNotHolder},
		"the webhook's missing":       {err: missing.StatusError(), want: protocol.ReasonLeaseMissing},
		"the webhook's future":        {err: future.StatusError(), want: protocol.ReasonFutureEpoch},
		"the webhook's invalid":       {err: invalid.StatusError(), want: protocol.ReasonInvalid},
		"the webhook's, wrapped by the writer": {
			err: fmt.Errorf("writing FencedResource ns/orders at epoch 5: %w", missing.StatusError()), want: protocol.ReasonLeaseMissing,
		},
		"the CRD's 422 stale epoch":          {err: crdStaleEpoch(4, 5), want: protocol.ReasonStale},
		"the CRD's 422 stale epoch, wrapped": {err: fmt.Errorf("writing FencedResource ns/orders at epoch 4: %w", crdStaleEpoch(4, 5)), want: protocol.ReasonStale},
		"a 422 on another field": {
			err: apierrors.NewInvalid(schema.GroupKind{Group: fencingv1alpha1.GroupVersion.Group, Kind: "FencedResource"}, "orders",
				field.ErrorList{field.Invalid(field.NewPath("spec", "leaseName"), "Orders", "stale epoch is not a name")}),
			want: "",
		},
		"a 422 on spec.epoch that is not the rule": {
			err: apierrors.NewInvalid(schema.GroupKind{Group: fencingv1alpha1.GroupVersion.Group, Kind: "FencedResource"}, "orders",
				field.ErrorList{field.Invalid(field.NewPath("spec", "epoch"), -1, "should be greater than or equal to 0")}),
			want: "",
		},
		"a conflict": {
			err:  apierrors.NewConflict(schema.GroupResource{Group: fencingv1alpha1.GroupVersion.Group, Resource: "fencedresources"}, "orders", errors.New("the object has been modified")),
			want: "",
		},
		"RBAC forbidden": {
			err:  apierrors.NewForbidden(schema.GroupResource{Group: fencingv1alpha1.GroupVersion.Group, Resource: "fencedresources"}, "orders", errors.New("no RBAC policy matched")),
			want: "",
		},
		"not found": {
			err: apierrors.NewNotFound(schema.GroupResource{Group: fencingv1alpha1.GroupVersion.Group, Resource: "fencedresources"}, "orders"), want: "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := fencing.ReasonOf(tc.err); got != tc.want {
				t.Errorf("ReasonOf() = %q, want %q", got, tc.want)
			}
			preds := map[string]struct {
				got, want bool
			}{
				"IsStale":        {fencing.IsStale(tc.err), tc.want == protocol.ReasonStale},
				"IsNotHolder":    {fencing.IsNotHolder(tc.err), tc.want == protocol.ReasonNotHolder},
				"IsLeaseMissing": {fencing.IsLeaseMissing(tc.err), tc.want == protocol.ReasonLeaseMissing},
				"IsTokenMissing": {fencing.IsTokenMissing(tc.err), tc.want == protocol.ReasonTokenMissing},
				"IsFenced":       {fencing.IsFenced(tc.err), tc.want != ""},
			}
			for p, v := range preds {
				if v.got != v.want {
					t.Errorf("%s() = %v, want %v", p, v.got, v.want)
				}
			}
		})
	}
}

// TestAPIStatus: the status the webhook returns is 403 (never retried as a conflict), 422 for malformed
// writes, and carries the reason as the first cause, on the field the refusal is about (spec.epoch unless
// it says otherwise).
func TestAPIStatus(t *testing.T) {
	// refused is the status of a refusal of a write of FencedResource ns/orders, with its one cause.
	refused := func(code int32, reason metav1.StatusReason, cause, field, msg string) metav1.Status {
		return metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
			Details: &metav1.StatusDetails{Group: "fencing.fencekit.io", Kind: "fencedresources", Name: "ns/orders",
				Causes: []metav1.StatusCause{{Type: metav1.CauseType(cause), Field: field, Message: msg}}}}
	}
	const (
		stale   = "stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"
		tooMuch = "FencedResource ns/orders: spec.data is 262145 bytes, over the bound of 262144 bytes"
	)
	tests := map[string]struct {
		err  *fencing.Error
		want metav1.Status
	}{
		"stale": {refusal(protocol.ReasonStale, 5, 6, stale),
			refused(403, metav1.StatusReasonForbidden, "FencingStaleEpoch", "spec.epoch", stale)},
		"invalid": {refusal(protocol.ReasonInvalid, 6, 0, "too big"),
			refused(422, metav1.StatusReasonInvalid, "FencingInvalid", "spec.epoch", "too big")},
		"data over the size bound names spec.data": {at("spec.data", refusal(protocol.ReasonInvalid, 6, 0, tooMuch)),
			refused(422, metav1.StatusReasonInvalid, "FencingInvalid", "spec.data", tooMuch)},
		"token missing names the changed field": {at("spec.data", refusal(protocol.ReasonTokenMissing, 0, 0, "no token")),
			refused(403, metav1.StatusReasonForbidden, "FencingTokenMissing", "spec.data", "no token")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.err.APIStatus()); diff != "" {
				t.Errorf("APIStatus() (-want +got):\n%s", diff)
			}
			if got := tc.err.StatusError().Error(); got != tc.want.Message {
				t.Errorf("StatusError().Error() = %q, want %q", got, tc.want.Message)
			}
		})
	}
}

func at(field string, e *fencing.Error) *fencing.Error {
	e.Field = field
	return e
}

func refusal(reason protocol.Reason, epoch, leaseEpoch int64, msg string) *fencing.Error {
	return &fencing.Error{Reason: reason, Resource: "ns/orders", Lease: "orders-writer", Epoch: epoch, LeaseEpoch: leaseEpoch, Message: msg}
}
