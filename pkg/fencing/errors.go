package fencing

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Error is a fenced write refused by fencekit, with the numbers involved.
type Error struct {
	Reason protocol.Reason
	// Resource is what was written: a FencedResource ("namespace/name"), or for the fences outside
	// Kubernetes a fence name (sqlfence) or a fenced key (httpfence). Lease is the bound Lease's name, when
	// known.
	Resource, Lease string
	// Epoch is the epoch the write carried. LeaseEpoch is the epoch the target holds against it: the Lease's
	// current epoch for a FencedResource, the highest epoch admitted for the fences outside Kubernetes
	// (0 when unknown).
	Epoch, LeaseEpoch int64
	// Field is the field the refusal is about, as the API error's cause names it ("spec.data",
	// "metadata.ownerReferences", ...); empty means spec.epoch.
	Field string
	// Message is the human-readable explanation.
	Message string
	// Kind is the kind of the refused object when it is not a FencedResource (an object declared by a
	// FencingPolicy: "ConfigMap", "Deployment"); empty for a FencedResource.
	Kind string
}

func (e *Error) Error() string { return e.Message }

// APIStatus renders the error as the API status the admission webhook returns: 403 Forbidden, so that
// clients never retry it as a resourceVersion conflict, with the reason as the first cause's type.
func (e *Error) APIStatus() metav1.Status {
	field := e.Field
	if field == "" {
		field = "spec.epoch"
	}
	code := int32(http.StatusForbidden)
	reason := metav1.StatusReasonForbidden
	if e.Reason == protocol.ReasonInvalid {
		code, reason = http.StatusUnprocessableEntity, metav1.StatusReasonInvalid
	}
	group, kind := fencingv1alpha1.GroupVersion.Group, "fencedresources"
	if e.Kind != "" {
		group, kind = "", e.Kind
	}
	return metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  reason,
		Message: e.Message,
		Details: &metav1.StatusDetails{
			Group: group,
			Kind:  kind,
			Name:  e.Resource,
			Causes: []metav1.StatusCause{{
				Type:    metav1.CauseType(e.Reason),
				Message: e.Message,
				Field:   field,
			}},
		},
	}
}

// StatusError returns the error as an *apierrors.StatusError, as a webhook handler returns it.
func (e *Error) StatusError() *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: e.APIStatus()}
}

// ReasonOf returns the fencing reason of err: an *Error in its chain, or an API error returned by the
// apiserver for a write that fencekit refused (from the webhook, or from the CRD's own epoch rule, which
// counts as protocol.ReasonStale). It returns "" for any other error.
func ReasonOf(err error) protocol.Reason {
	if err == nil {
		return ""
	}
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Reason
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ""
	}
	s := status.Status()
	if s.Details != nil {
		for _, c := range s.Details.Causes {
			switch r := protocol.Reason(c.Type); r {
			case protocol.ReasonStale, protocol.ReasonNotHolder, protocol.ReasonLeaseMissing, protocol.ReasonFutureEpoch, protocol.ReasonInvalid, protocol.ReasonTokenMissing:
				return r
			}
			// The CRD's rules: "stale epoch 4: this FencedResource has already admitted epoch 5", and those
			// on a declaration's spec.raisedEpoch.
			if (c.Field == "spec.epoch" || c.Field == "spec.raisedEpoch") && strings.Contains(c.Message, fencingv1alpha1.StaleEpochMessage) {
				return protocol.ReasonStale
			}
		}
	}
	return ""
}

// IsStale reports whether err refused a write because its epoch is below the current one: the writer is a
// former holder and must stop.
func IsStale(err error) bool { return ReasonOf(err) == protocol.ReasonStale }

// IsNotHolder reports whether err refused a write that did not come from the Lease's current holder.
func IsNotHolder(err error) bool { return ReasonOf(err) == protocol.ReasonNotHolder }

// IsLeaseMissing reports whether err refused a write because the bound Lease is missing or has no epoch.
func IsLeaseMissing(err error) bool { return ReasonOf(err) == protocol.ReasonLeaseMissing }

// IsTokenMissing reports whether err refused a write of a fenced field that presented no fencing token
// (or a delete under a live Lease without the current deletion marker).
func IsTokenMissing(err error) bool { return ReasonOf(err) == protocol.ReasonTokenMissing }

// IsFenced reports whether err is any refusal by fencekit's fencing (as opposed to a network or API error).
func IsFenced(err error) bool { return ReasonOf(err) != "" }

func errorf(reason protocol.Reason, resource, lease string, epoch, leaseEpoch int64, format string, args ...any) *Error {
	return &Error{Reason: reason, Resource: resource, Lease: lease, Epoch: epoch, LeaseEpoch: leaseEpoch, Message: fmt.Sprintf(format, args...)}
}
