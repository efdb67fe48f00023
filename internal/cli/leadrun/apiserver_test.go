package leadrun_test

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fencekit/fencekit/internal/cli/leadrun"
)

// TestIsPermanent: what retrying cannot change is permanent; a missing Lease, a conflict, a timeout and
// a refused connection are not.
func TestIsPermanent(t *testing.T) {
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for name, tc := range map[string]struct {
		err  error
		want bool
	}{
		"missing namespace":  {apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop"), true},
		"missing Lease":      {apierrors.NewNotFound(leases, "orders"), false},
		"forbidden":          {apierrors.NewForbidden(leases, "orders", errors.New("RBAC")), true},
		"unauthorized":       {apierrors.NewUnauthorized("bad token"), true},
		"invalid":            {apierrors.NewInvalid(schema.GroupKind{Group: "coordination.k8s.io", Kind: "Lease"}, "orders", field.ErrorList{field.Invalid(field.NewPath("metadata", "name"), "Bad_Name", "no")}), true},
		"conflict":           {apierrors.NewConflict(leases, "orders", errors.New("changed")), false},
		"timeout":            {apierrors.NewTimeoutError("slow", 1), false},
		"connection refused": {errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), false},
		"nil":                {nil, false},
	} {
		if _, got := leadrun.IsPermanent(tc.err); got != tc.want {
			t.Errorf("%s: IsPermanent(%v) = %v, want %v", name, tc.err, got, tc.want)
		}
	}
}
