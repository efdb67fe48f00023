package admission_test

import (
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// requester is who writes, and the field manager the request presents.
type requester struct {
	Username     string
	Groups       []string
	FieldManager string
}

// decideOnQuorum decides r as the webhook does with no copy of the Lease: without it first, then, if the
// rule asks, on a quorum read of lease (nil: it does not exist).
func decideOnQuorum(r *admission.Request, lease *coordinationv1.Lease) *fencing.Error {
	r.Complete()
	v := admission.Decide(r, nil, now)
	if v.Need != admission.Decided {
		v = admission.Decide(r, admission.ParseLease(lease, admission.Quorum), now)
	}
	if v.Need != admission.Decided {
		panic(fmt.Sprintf("Decide on a quorum read asks for more: %v", v.Need))
	}
	return v.Err
}

func toUnstructured(fr *fencingv1alpha1.FencedResource) *unstructured.Unstructured {
	if fr == nil {
		return nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(fr)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func frRequest(op admission.Operation, old, updated *fencingv1alpha1.FencedResource, req requester) *admission.Request {
	r := &admission.Request{Class: admission.FencedResource, Operation: op, Kind: "FencedResource", Namespace: "ns", Name: "orders",
		LeaseName: "orders-writer", User: admission.User{Name: req.Username, Groups: req.Groups}, FieldManager: req.FieldManager,
		Old: toUnstructured(old), New: toUnstructured(updated)}
	return r
}

// checkWrite decides the create (old nil) or update of a FencedResource.
func checkWrite(old, fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease, req requester) *fencing.Error {
	op := admission.Update
	if old == nil {
		op = admission.Create
	}
	return decideOnQuorum(frRequest(op, old, fr, req), lease)
}

// checkDelete decides the delete of fr in namespace ns (nil: not read, or it does not exist).
func checkDelete(fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease, ns *corev1.Namespace, req requester) *fencing.Error {
	fr = fr.DeepCopy()
	fr.ResourceVersion = "7"
	r := frRequest(admission.Delete, fr, nil, req)
	r.FieldManager, r.DeletePrecondition = "", "7" // as pkg/fencing's Writer.Delete names its marker write
	r.NamespaceTerminating = ns != nil && (ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating)
	return decideOnQuorum(r, lease)
}

// objectWrite is a write of ConfigMap ns/app, which FencingPolicy ns/app covers for lease orders-writer.
type objectWrite struct {
	sub          string
	old, updated *unstructured.Unstructured
}

func (w objectWrite) request(req requester) *admission.Request {
	op := admission.Update
	if w.old == nil {
		op = admission.Create
	}
	return &admission.Request{Class: admission.Object, Operation: op, Subresource: w.sub, Kind: "ConfigMap", Namespace: "ns", Name: "app",
		Policy: "ns/app", LeaseName: "orders-writer", User: admission.User{Name: req.Username, Groups: req.Groups},
		FieldManager: req.FieldManager, Old: w.old, New: w.updated, CoveredBefore: w.old != nil, CoveredAfter: true}
}

func checkObjectWrite(w objectWrite, lease *coordinationv1.Lease, req requester) *fencing.Error {
	return decideOnQuorum(w.request(req), lease)
}

func checkObjectDelete(old *unstructured.Unstructured, lease *coordinationv1.Lease, req requester) *fencing.Error {
	r := write(old, nil, "").request(req)
	r.Operation, r.New, r.CoveredAfter = admission.Delete, nil, false
	r.DeletePrecondition = old.GetResourceVersion() // as pkg/fencing's NewClient names its marker write
	return decideOnQuorum(r, lease)
}

// diffErr compares two refusals by what a client tests and what a user reads off them: the reason, the
// field, the numbers, the object and the Lease; and the message must name the object. "" if they agree.
func diffErr(want, got *fencing.Error) string {
	switch {
	case want == nil && got == nil:
		return ""
	case want == nil:
		return fmt.Sprintf("want admitted, got %s: %s", got.Reason, got.Message)
	case got == nil:
		return fmt.Sprintf("want %s (%s), got admitted", want.Reason, want.Message)
	}
	type key struct {
		Reason                protocol.Reason
		Field, Resource, Kind string
		Epoch, LeaseEpoch     int64
	}
	wk := key{want.Reason, want.Field, want.Resource, want.Kind, want.Epoch, want.LeaseEpoch}
	gk := key{got.Reason, got.Field, got.Resource, got.Kind, got.Epoch, got.LeaseEpoch}
	if wk != gk {
		return fmt.Sprintf("want %+v, got %+v (%s)", wk, gk, got.Message)
	}
	if !strings.Contains(got.Message, got.Resource) {
		return fmt.Sprintf("the message does not name the object %s: %s", got.Resource, got.Message)
	}
	return ""
}

var _ = time.Second
