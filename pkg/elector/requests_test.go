package elector

import (
	"errors"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A request's answer reaches the elector without its managedFields, with the request's error.
func TestAnswerDropsManagedFields(t *testing.T) {
	sent := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", ResourceVersion: "7",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "fencing.fencekit.io/epoch=3"}}}}
	errConflict := errors.New("conflict")
	got, err := answer(func() (*coordinationv1.Lease, error) { return sent, errConflict })
	if got != sent || !errors.Is(err, errConflict) {
		t.Fatalf("answer returned %v, %v; want the request's Lease and error", got, err)
	}
	if got.ManagedFields != nil {
		t.Errorf("managedFields %v kept, want none", got.ManagedFields)
	}
	if got, err := answer(func() (*coordinationv1.Lease, error) { return nil, errConflict }); got != nil || !errors.Is(err, errConflict) {
		t.Errorf("answer of a failed request: %v, %v; want nil, the error", got, err)
	}
}
