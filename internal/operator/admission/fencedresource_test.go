package admission_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// now is the fixed instant every check below is judged at.
var now = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// resource builds FencedResource ns/orders bound to lease orders-writer.
type resource struct {
	epoch  int64
	data   string // raw JSON; "" for none
	writer string // the writer annotation; "" for none
	labels map[string]string
	annots map[string]string
	owners []metav1.OwnerReference
}

func (r resource) build() *fencingv1alpha1.FencedResource {
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", Labels: r.labels, Annotations: map[string]string{}},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer", Epoch: r.epoch},
	}
	fr.OwnerReferences = r.owners
	for k, v := range r.annots {
		fr.Annotations[k] = v
	}
	if r.writer != "" {
		fr.Annotations[fencingv1alpha1.WriterAnnotation] = r.writer
	}
	if r.data != "" {
		fr.Spec.Data = &runtime.RawExtension{Raw: []byte(r.data)}
	}
	return fr
}

// leaseAt is lease orders-writer as the elector writes it: acquired at epoch by worker-b (user worker-b-user),
// renewed 5 s before now, 15 s duration. mutate adjusts it.
func leaseAt(epoch string, mutate ...func(*coordinationv1.Lease)) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "orders-writer",
			Labels: map[string]string{protocol.FencedLabel: "true"},
			Annotations: map[string]string{
				protocol.EpochAnnotation:    epoch,
				protocol.AcquirerAnnotation: "worker-b-user",
			},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To("worker-b"),
			LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime:            ptr.To(metav1.NewMicroTime(now.Add(-5 * time.Second))),
		},
	}
	for _, m := range mutate {
		m(l)
	}
	return l
}

var (
	ghostOwner = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "ghost", UID: "00000000-0000-0000-0000-000000000001"}
	otherOwner = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: "00000000-0000-0000-0000-000000000002"}
	holderUser = requester{Username: "worker-b-user", Groups: []string{"system:authenticated"}}
	otherUser  = requester{Username: "worker-a-user", Groups: []string{"system:authenticated"}}
)

// tok is r presenting epoch as its fencing token (its request's field manager).
func tok(r requester, epoch int64) requester {
	r.FieldManager = protocol.FieldManagerFor(epoch)
	return r
}

// at is e about field.
func at(field string, e *fencing.Error) *fencing.Error {
	e.Field = field
	return e
}

func refusal(reason protocol.Reason, epoch, leaseEpoch int64, msg string) *fencing.Error {
	return &fencing.Error{Reason: reason, Resource: "ns/orders", Lease: "orders-writer", Epoch: epoch, LeaseEpoch: leaseEpoch, Message: msg}
}

func TestFencedResourceWrite(t *testing.T) {
	// A payload of exactly MaxDataBytes bytes once serialized, and one byte more.
	blob := func(size int) string {
		return `{"blob":"` + strings.Repeat("x", size-len(`{"blob":""}`)) + `"}`
	}
	written := resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b"}
	tests := map[string]struct {
		old   *resource // nil: a create
		fr    resource
		lease *coordinationv1.Lease
		req   requester
		want  *fencing.Error // nil: admitted
	}{
		"declaration (no data, epoch 0) without a lease": {
			fr: resource{}, req: otherUser,
		},
		"declaration with null data without a lease": {
			fr: resource{data: "null"}, req: otherUser,
		},
		"labels-only update without a lease": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", labels: map[string]string{"team": "orders"}}, req: otherUser,
		},
		"annotation-only update without a lease": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", annots: map[string]string{"note": "x"}}, req: otherUser,
		},
		"the holder writes at the current epoch": {
			old: &resource{}, fr: written, lease: leaseAt("6"), req: tok(holderUser, 6),
		},
		"the holder creates with data at the current epoch": {
			fr: written, lease: leaseAt("6"), req: tok(holderUser, 6),
		},
		"data of exactly MaxDataBytes": {
			old: &written, fr: resource{epoch: 6, data: blob(fencingv1alpha1.MaxDataBytes), writer: "worker-b"}, lease: leaseAt("6"), req: tok(holderUser, 6),
		},
		"renewed exactly one lease duration ago is still live": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-15 * time.Second)))
			}),
		},
		"data change with the lease missing": {
			old: &resource{epoch: 3, data: `{"v":1}`, writer: "worker-b"}, fr: resource{epoch: 3, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 3),
			want: refusal(protocol.ReasonLeaseMissing, 3, 0,
				"lease orders-writer not found in namespace ns: FencedResource ns/orders cannot be written at epoch 3 until an elector holds that lease"),
		},
		"lease without an epoch annotation": {
			old: &resource{}, fr: written, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) { delete(l.Annotations, protocol.EpochAnnotation) }),
			want: refusal(protocol.ReasonLeaseMissing, 6, 0,
				"lease orders-writer cannot fence FencedResource ns/orders: it has no fencing.fencekit.io/epoch annotation (no fencekit elector has acquired it)"),
		},
		"lease with a garbage epoch annotation": {
			old: &resource{}, fr: written, lease: leaseAt("six"), req: tok(holderUser, 6),
			want: refusal(protocol.ReasonLeaseMissing, 6, 0,
				`lease orders-writer cannot fence FencedResource ns/orders: its fencing.fencekit.io/epoch annotation "six" is not an epoch >= 1`),
		},
		"lease at epoch 0": {
			old: &resource{}, fr: resource{data: `{"v":1}`, writer: "worker-b"}, lease: leaseAt("0"), req: tok(holderUser, 6),
			want: refusal(protocol.ReasonLeaseMissing, 6, 0,
				`lease orders-writer cannot fence FencedResource ns/orders: its fencing.fencekit.io/epoch annotation "0" is not an epoch >= 1`),
		},
		"FencedResource ns/orders: stale epoch": {
			old: &resource{epoch: 5, data: `{"v":"a5"}`, writer: "worker-a"}, fr: resource{epoch: 5, data: `{"v":"a5-late"}`, writer: "worker-a"},
			lease: leaseAt("6"), req: tok(otherUser, 5),
			want: refusal(protocol.ReasonStale, 5, 6, "FencedResource ns/orders: stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"FencedResource ns/orders: stale epoch, lease released": {
			old: &resource{epoch: 5, data: `{"v":"a5"}`, writer: "worker-a"}, fr: resource{epoch: 5, data: `{"v":"a5-late"}`, writer: "worker-a"},
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }), req: tok(otherUser, 5),
			want: refusal(protocol.ReasonStale, 5, 6, "FencedResource ns/orders: stale epoch 5: lease orders-writer is at epoch 6, held by nobody"),
		},
		"FencedResource ns/orders: stale epoch from a break-glass user": {
			old: &resource{epoch: 5, data: `{"v":"a5"}`, writer: "worker-a"}, fr: resource{epoch: 5, data: `{"v":"admin"}`, writer: "worker-a"},
			lease: leaseAt("6"), req: tok(requester{Username: "oncall", Groups: []string{admission.BreakGlassGroup}}, 5),
			want: refusal(protocol.ReasonStale, 5, 6, "FencedResource ns/orders: stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"future epoch": {
			old: &written, fr: resource{epoch: 7, data: `{"v":"b7"}`, writer: "worker-b"}, lease: leaseAt("6"), req: tok(holderUser, 7),
			want: refusal(protocol.ReasonFutureEpoch, 7, 6, "FencedResource ns/orders: epoch 7 was never issued: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"released lease (empty holder)": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }),
			want: refusal(protocol.ReasonNotHolder, 6, 6,
				"lease orders-writer at epoch 6 has no holder (it was released): nobody may write FencedResource ns/orders"),
		},
		"expired lease": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-20*time.Second - 250*time.Millisecond)))
			}),
			want: refusal(protocol.ReasonNotHolder, 6, 6,
				"FencedResource ns/orders: lease orders-writer at epoch 6 expired 5.25s ago (held by worker-b, last renewed 2026-11-30T08:59:39.75Z, duration 15s)"),
		},
		"lease without renewTime": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil }),
			want: refusal(protocol.ReasonNotHolder, 6, 6,
				"FencedResource ns/orders: lease orders-writer at epoch 6 has no valid renewTime or leaseDurationSeconds: its holder worker-b cannot be shown to be live"),
		},
		"lease without leaseDurationSeconds": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = nil }),
			want: refusal(protocol.ReasonNotHolder, 6, 6,
				"FencedResource ns/orders: lease orders-writer at epoch 6 has no valid renewTime or leaseDurationSeconds: its holder worker-b cannot be shown to be live"),
		},
		"lease with leaseDurationSeconds 0": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](0) }),
			want: refusal(protocol.ReasonNotHolder, 6, 6,
				"FencedResource ns/orders: lease orders-writer at epoch 6 has no valid renewTime or leaseDurationSeconds: its holder worker-b cannot be shown to be live"),
		},
		"wrong writer annotation": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-x"}, lease: leaseAt("6"), req: tok(holderUser, 6),
			want: at(admission.FieldWriter, refusal(protocol.ReasonNotHolder, 6, 6,
				`FencedResource ns/orders: write names holder "worker-x" (annotation fencing.fencekit.io/writer) but lease orders-writer at epoch 6 is held by worker-b`)),
		},
		"no writer annotation": {
			old: &resource{}, fr: resource{epoch: 6, data: `{"v":2}`}, lease: leaseAt("6"), req: tok(holderUser, 6),
			want: at(admission.FieldWriter, refusal(protocol.ReasonNotHolder, 6, 6,
				`FencedResource ns/orders: write names holder "" (annotation fencing.fencekit.io/writer) but lease orders-writer at epoch 6 is held by worker-b`)),
		},
		"only the writer annotation changes": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-x"}, lease: leaseAt("6"), req: tok(holderUser, 6),
			want: at(admission.FieldWriter, refusal(protocol.ReasonNotHolder, 6, 6,
				`FencedResource ns/orders: write names holder "worker-x" (annotation fencing.fencekit.io/writer) but lease orders-writer at epoch 6 is held by worker-b`)),
		},
		"wrong user with the holder's token": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"copied"}`, writer: "worker-b"}, lease: leaseAt("6"), req: tok(otherUser, 6),
			want: refusal(protocol.ReasonNotHolder, 6, 6,
				`user "worker-a-user" is not the user that acquired lease orders-writer at epoch 6 ("worker-b-user"): only the holder worker-b may write FencedResource ns/orders`),
		},
		"break-glass group writes at the current epoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"fixed"}`, writer: "worker-b"}, lease: leaseAt("6"),
			req: tok(requester{Username: "oncall", Groups: []string{"system:authenticated", admission.BreakGlassGroup}}, 6),
		},
		"system:masters writes at the current epoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"fixed"}`, writer: "worker-b"}, lease: leaseAt("6"),
			req: tok(requester{Username: "kubernetes-admin", Groups: []string{"system:masters"}}, 6),
		},
		// The token is in the request, never inherited from the stored object.
		"a stale replica of the holder's user changes data without a token": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"stale"}`, writer: "worker-b"}, lease: leaseAt("6"), req: holderUser,
			want: at(admission.FieldData, refusal(protocol.ReasonTokenMissing, 0, 0,
				"FencedResource ns/orders: this write changes spec.data but presents no fencing token (no field manager): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)")),
		},
		"server-side apply of data under another field manager": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"ssa"}`, writer: "worker-b"}, lease: leaseAt("6"),
			req: requester{Username: "worker-b-user", FieldManager: "worker"},
			want: at(admission.FieldData, refusal(protocol.ReasonTokenMissing, 0, 0,
				`FencedResource ns/orders: this write changes spec.data but presents no fencing token (field manager "worker"): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)`)),
		},
		"an old token while the resource inherits the current epoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"a5"}`, writer: "worker-b"}, lease: leaseAt("6"), req: tok(holderUser, 5),
			want: refusal(protocol.ReasonStale, 5, 6, "FencedResource ns/orders: stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"an old token that changes nothing is still refused": {
			old: &written, fr: written, lease: leaseAt("6"), req: tok(holderUser, 5),
			want: refusal(protocol.ReasonStale, 5, 6, "FencedResource ns/orders: stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"the current token, but spec.epoch left behind": {
			old: &resource{epoch: 5, data: `{"v":1}`, writer: "worker-b"}, fr: resource{epoch: 5, data: `{"v":2}`, writer: "worker-b"}, lease: leaseAt("6"), req: tok(holderUser, 6),
			want: at(admission.FieldEpoch, refusal(protocol.ReasonInvalid, 6, 6,
				"FencedResource ns/orders: the write presents epoch 6 but its spec.epoch would be 5: a fenced write sets spec.epoch to the epoch it presents")),
		},
		"a field manager that is not a canonical token": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, lease: leaseAt("6"), req: requester{Username: "worker-b-user", FieldManager: "fencing.fencekit.io/epoch=06"},
			want: at("fieldManager", refusal(protocol.ReasonInvalid, 0, 0,
				`FencedResource ns/orders: field manager "fencing.fencekit.io/epoch=06" is not a valid fencing token: want fencing.fencekit.io/epoch=N, N a decimal in [1, 9007199254740991] without sign or leading zeros`)),
		},
		"a token above MaxEpoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, lease: leaseAt("6"), req: requester{Username: "worker-b-user", FieldManager: "fencing.fencekit.io/epoch=9007199254740992"},
			want: at("fieldManager", refusal(protocol.ReasonInvalid, 0, 0,
				`FencedResource ns/orders: field manager "fencing.fencekit.io/epoch=9007199254740992" is not a valid fencing token: want fencing.fencekit.io/epoch=N, N a decimal in [1, 9007199254740991] without sign or leading zeros`)),
		},
		"a lease epoch above MaxEpoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, lease: leaseAt("9007199254740992"), req: tok(holderUser, 6),
			want: refusal(protocol.ReasonLeaseMissing, 6, 0,
				`lease orders-writer cannot fence FencedResource ns/orders: its fencing.fencekit.io/epoch annotation "9007199254740992" is above the highest epoch 9007199254740991 (no fencekit elector issues it)`),
		},
		"break glass without a token": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"fixed"}`, writer: "worker-b"}, lease: leaseAt("6"),
			req: requester{Username: "oncall", Groups: []string{admission.BreakGlassGroup}},
			want: at(admission.FieldData, refusal(protocol.ReasonTokenMissing, 0, 0,
				"FencedResource ns/orders: this write changes spec.data but presents no fencing token (no field manager): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)")),
		},
		"a lease without the fenced label": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: tok(holderUser, 6),
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Labels = nil }),
			want: refusal(protocol.ReasonLeaseMissing, 6, 0,
				"lease orders-writer cannot fence FencedResource ns/orders: it lacks the label fencing.fencekit.io/fenced=true, so its epochs are not guarded by fencekit's Lease policy and prove nothing"),
		},
		"a big integer changed without a token (equal as float64)": {
			old: &resource{epoch: 6, data: `{"n":9007199254740993}`, writer: "worker-b"}, fr: resource{epoch: 6, data: `{"n":9007199254740992}`, writer: "worker-b"},
			lease: leaseAt("6"), req: otherUser,
			want: at(admission.FieldData, refusal(protocol.ReasonTokenMissing, 0, 0,
				"FencedResource ns/orders: this write changes spec.data but presents no fencing token (no field manager): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)")),
		},
		"an owner reference added without a token": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", owners: []metav1.OwnerReference{ghostOwner}}, lease: leaseAt("6"), req: otherUser,
			want: at("metadata.ownerReferences", refusal(protocol.ReasonTokenMissing, 0, 0,
				"FencedResource ns/orders: this write changes metadata.ownerReferences but presents no fencing token (no field manager): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)")),
		},
		"the garbage collector adds an owner reference": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", owners: []metav1.OwnerReference{ghostOwner}}, lease: leaseAt("6"),
			req: requester{Username: admission.GarbageCollectorUser},
			want: at("metadata.ownerReferences", refusal(protocol.ReasonTokenMissing, 0, 0,
				"FencedResource ns/orders: this write changes metadata.ownerReferences but presents no fencing token (no field manager): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)")),
		},
		"the garbage collector removes an owner reference": {
			old:   &resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", owners: []metav1.OwnerReference{ghostOwner, otherOwner}},
			fr:    resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", owners: []metav1.OwnerReference{otherOwner}},
			lease: leaseAt("6"), req: requester{Username: admission.GarbageCollectorUser},
		},
		"another user removes an owner reference": {
			old:   &resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", owners: []metav1.OwnerReference{ghostOwner, otherOwner}},
			fr:    resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", owners: []metav1.OwnerReference{ghostOwner}},
			lease: leaseAt("6"), req: otherUser,
			want: at("metadata.ownerReferences", refusal(protocol.ReasonTokenMissing, 0, 0,
				"FencedResource ns/orders: this write changes metadata.ownerReferences but presents no fencing token (no field manager): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)")),
		},
		// An owner deletes: one the creator controls would let it have the garbage collector delete the data
		// the holder writes into the resource later.
		"a create with an owner reference needs the token": {
			fr: resource{owners: []metav1.OwnerReference{ghostOwner}}, req: otherUser,
			want: at("metadata.ownerReferences", refusal(protocol.ReasonTokenMissing, 0, 0, "")),
		},
		"finalizers and labels are free": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", labels: map[string]string{"x": "y"}}, req: otherUser,
		},
		"the holder writes the deletion marker": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", annots: map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: "6"}},
			lease: leaseAt("6"), req: tok(holderUser, 6),
		},
		"a deletion marker other than the presented epoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", annots: map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: "7"}},
			lease: leaseAt("6"), req: tok(holderUser, 6),
			want: at(admission.FieldDeleteAtEpoch, refusal(protocol.ReasonInvalid, 6, 6,
				`FencedResource ns/orders: the deletion marker fencing.fencekit.io/delete-at-epoch="7" must be the presented epoch 6`)),
		},
		"a deletion marker written without a token": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", annots: map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: "6"}},
			lease: leaseAt("6"), req: holderUser,
			want: at(admission.FieldDeleteAtEpoch, refusal(protocol.ReasonTokenMissing, 0, 0,
				"FencedResource ns/orders: this write changes metadata.annotations[fencing.fencekit.io/delete-at-epoch] but presents no fencing token (no field manager): only the holder of lease orders-writer may change them, and it must send the write with fieldManager=fencing.fencekit.io/epoch=<your epoch> (pkg/fencing's Writer does)")),
		},
		"data over MaxDataBytes": {
			old: &written, fr: resource{epoch: 6, data: blob(fencingv1alpha1.MaxDataBytes + 1), writer: "worker-b"}, lease: leaseAt("6"), req: tok(holderUser, 6),
			want: at(admission.FieldData, refusal(protocol.ReasonInvalid, 6, 0,
				"FencedResource ns/orders: spec.data is 262145 bytes, over the bound of 262144 bytes")),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var old *fencingv1alpha1.FencedResource
			if tc.old != nil {
				old = tc.old.build()
			}
			got := checkWrite(old, tc.fr.build(), tc.lease, tc.req)
			if diff := diffErr(tc.want, got); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFencedResourceDelete(t *testing.T) {
	expired := func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-time.Minute))) }
	terminating := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}}
	active := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
	notHolder := refusal(protocol.ReasonNotHolder, 4, 6,
		`FencedResource ns/orders is bound to lease orders-writer, held by worker-b at epoch 6: only that holder's user "worker-b-user" or an admin (group fencekit:breakglass) may delete it`)
	tests := map[string]struct {
		lease  *coordinationv1.Lease
		ns     *corev1.Namespace
		marker string // the stored deletion marker; "" for none
		req    requester
		want   *fencing.Error
	}{
		"no lease": {req: otherUser},
		"the holder's user, marker at the current epoch": {lease: leaseAt("6"), marker: "6", req: holderUser},
		"the holder's user without the marker (a stale replica, or a plain kubectl delete)": {
			lease: leaseAt("6"), req: holderUser,
			want: at(admission.FieldDeleteAtEpoch, refusal(protocol.ReasonTokenMissing, 0, 6,
				"FencedResource ns/orders is bound to lease orders-writer, held by worker-b at epoch 6: a DELETE carries no fencing token, so the holder first writes the annotation fencing.fencekit.io/delete-at-epoch=6 with its token, then deletes (pkg/fencing's Writer.Delete does both)")),
		},
		"the holder's user with an old marker (a stale replica of the same user)": {
			lease: leaseAt("6"), marker: "5", req: holderUser,
			want: at(admission.FieldDeleteAtEpoch, refusal(protocol.ReasonStale, 5, 6,
				`FencedResource ns/orders: stale deletion marker fencing.fencekit.io/delete-at-epoch="5": lease orders-writer is at epoch 6, held by worker-b`)),
		},
		"the holder's user, lease without the fenced label": {
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Labels = nil }), marker: "6", req: holderUser,
			want: refusal(protocol.ReasonLeaseMissing, 4, 6,
				"FencedResource ns/orders is bound to lease orders-writer, which lacks the label fencing.fencekit.io/fenced=true: its acquirer is not guarded by fencekit's Lease policy, so while it is live only an admin (group fencekit:breakglass) may delete the resource"),
		},
		"another user with the current marker": {lease: leaseAt("6"), marker: "6", req: otherUser, want: notHolder},
		"another user, expired lease":          {lease: leaseAt("6", expired), req: otherUser},
		"another user, released lease": {
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }), req: otherUser,
		},
		"another user, lease with a garbage epoch": {lease: leaseAt("x"), req: otherUser},
		"kube-system's garbage collector, a resource without owners (not a dependent)": {
			lease: leaseAt("6"), req: requester{Username: admission.GarbageCollectorUser}, want: notHolder,
		},
		"kube-system's namespace controller, namespace terminating": {
			lease: leaseAt("6"), ns: terminating, req: requester{Username: admission.NamespaceControllerUser},
		},
		"kube-system's namespace controller, namespace being deleted (deletionTimestamp)": {
			lease: leaseAt("6"), req: requester{Username: admission.NamespaceControllerUser},
			ns: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", DeletionTimestamp: ptr.To(metav1.NewTime(now))}},
		},
		"kube-system's namespace controller, namespace active": {
			lease: leaseAt("6"), ns: active, req: requester{Username: admission.NamespaceControllerUser},
			want: refusal(protocol.ReasonNotHolder, 4, 6,
				`FencedResource ns/orders is bound to lease orders-writer, held by worker-b at epoch 6: only that holder's user "worker-b-user" or an admin (group fencekit:breakglass) may delete it`),
		},
		"kube-system's namespace controller, namespace unknown": {
			lease: leaseAt("6"), req: requester{Username: admission.NamespaceControllerUser}, want: notHolder,
		},
		"another kube-system service account": {
			lease: leaseAt("6"), req: requester{Username: "system:serviceaccount:kube-system:replicaset-controller"}, want: notHolder,
		},
		"an admin (system:masters)": {
			lease: leaseAt("6"), req: requester{Username: "kubernetes-admin", Groups: []string{"system:masters"}},
		},
		"break-glass group": {
			lease: leaseAt("6"), req: requester{Username: "oncall", Groups: []string{admission.BreakGlassGroup}},
		},
		"another user, live lease": {lease: leaseAt("6"), req: otherUser, want: notHolder},
		"a service account of another namespace, live lease": {
			lease: leaseAt("6"), req: requester{Username: "system:serviceaccount:default:generic-garbage-collector"}, want: notHolder,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := resource{epoch: 4, data: `{"v":1}`, writer: "worker-a"}
			if tc.marker != "" {
				r.annots = map[string]string{fencingv1alpha1.DeleteAtEpochAnnotation: tc.marker}
			}
			if diff := diffErr(tc.want, checkDelete(r.build(), tc.lease, tc.ns, tc.req)); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMaxEpochAgrees: the CRD's bound (api/v1alpha1, which imports nothing of fencekit) is the elector's.
func TestMaxEpochAgrees(t *testing.T) {
	if fencingv1alpha1.MaxEpoch != protocol.MaxEpoch {
		t.Fatalf("api/v1alpha1.MaxEpoch = %d, protocol.MaxEpoch = %d", fencingv1alpha1.MaxEpoch, protocol.MaxEpoch)
	}
}

func TestParseLease(t *testing.T) {
	renewed := now.Add(-5 * time.Second)
	// held is leaseAt's Lease as ParseLease reads it (held by worker-b, acquired as worker-b-user, renewed
	// 5s ago for 15s), with the given epoch or, for an annotation that is no epoch, the error naming it.
	held := func(epoch int64, epochErr string) admission.Lease {
		return admission.Lease{Name: "orders-writer", Fenced: true, Epoch: epoch, Holder: "worker-b", Acquirer: "worker-b-user",
			RenewTime: renewed, Duration: 15 * time.Second, EpochErr: epochErr}
	}
	tests := map[string]struct {
		lease *coordinationv1.Lease
		want  admission.Lease
	}{
		"an acquired lease": {leaseAt("6"), held(6, "")},
		"garbage epoch":     {leaseAt("six"), held(0, `its fencing.fencekit.io/epoch annotation "six" is not an epoch >= 1`)},
		"empty epoch":       {leaseAt(""), held(0, `its fencing.fencekit.io/epoch annotation "" is not an epoch >= 1`)},
		"negative epoch":    {leaseAt("-3"), held(0, `its fencing.fencekit.io/epoch annotation "-3" is not an epoch >= 1`)},
		"leading zero (not the canonical form the elector writes)": {leaseAt("07"), held(0, `its fencing.fencekit.io/epoch annotation "07" is not an epoch >= 1`)},
		"plus sign":              {leaseAt("+7"), held(0, `its fencing.fencekit.io/epoch annotation "+7" is not an epoch >= 1`)},
		"epoch beyond int64":     {leaseAt("9223372036854775808"), held(0, `its fencing.fencekit.io/epoch annotation "9223372036854775808" is not an epoch >= 1`)},
		"largest epoch (2^53-1)": {leaseAt("9007199254740991"), held(9007199254740991, "")},
		"epoch above 2^53-1": {leaseAt("9007199254740992"),
			held(0, `its fencing.fencekit.io/epoch annotation "9007199254740992" is above the highest epoch 9007199254740991 (no fencekit elector issues it)`)},
		"no annotations at all (a plain client-go lease)": {
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Annotations = nil }),
			want: admission.Lease{Name: "orders-writer", Fenced: true, Holder: "worker-b", RenewTime: renewed, Duration: 15 * time.Second,
				EpochErr: "it has no fencing.fencekit.io/epoch annotation (no fencekit elector has acquired it)"},
		},
		"released, never renewed, no duration": {
			lease: leaseAt("2", func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = nil, nil, nil
			}),
			want: admission.Lease{Name: "orders-writer", Fenced: true, Epoch: 2, Acquirer: "worker-b-user"},
		},
		"negative duration": {
			lease: leaseAt("2", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](-1) }),
			want:  admission.Lease{Name: "orders-writer", Fenced: true, Epoch: 2, Holder: "worker-b", Acquirer: "worker-b-user", RenewTime: renewed},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(&tc.want, admission.ParseLease(tc.lease, admission.Quorum)); diff != "" {
				t.Errorf("ParseLease() (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWriteToAnObjectBeingDeleted: a FencedResource whose deletion was admitted goes once its finalizers
// are removed, and a user without the token may remove one that is not orphan or foregroundDeletion: the
// holder's write of data to it would be acknowledged and then lost when that user chooses. The holder may
// still remove finalizers and raise the epoch.
func TestWriteToAnObjectBeingDeleted(t *testing.T) {
	deleting := func(r resource, finalizers ...string) *fencingv1alpha1.FencedResource {
		fr := r.build()
		fr.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-time.Minute)))
		fr.Finalizers = finalizers
		return fr
	}
	stored := resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b"}
	tests := map[string]struct {
		new  *fencingv1alpha1.FencedResource
		req  requester
		want protocol.Reason
	}{
		"the holder writes data":              {deleting(resource{epoch: 6, data: `{"v":"b7"}`, writer: "worker-b"}, "example.com/hold"), tok(holderUser, 6), protocol.ReasonInvalid},
		"the holder removes a finalizer":      {deleting(stored), tok(holderUser, 6), ""},
		"the holder raises the epoch":         {deleting(resource{epoch: 7, data: `{"v":"b6"}`, writer: "worker-b"}, "example.com/hold"), tok(holderUser, 7), ""},
		"a user removes its finalizer":        {deleting(stored), otherUser, ""},
		"a stale holder writes data":          {deleting(resource{epoch: 5, data: `{"v":"b5"}`, writer: "worker-b"}, "example.com/hold"), tok(holderUser, 5), protocol.ReasonStale},
		"the holder labels it (free content)": {deleting(resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b", labels: map[string]string{"a": "b"}}, "example.com/hold"), tok(holderUser, 6), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			lease := leaseAt("6")
			if tc.req.FieldManager == protocol.FieldManagerFor(7) {
				lease = leaseAt("7")
			}
			err := checkWrite(deleting(stored, "example.com/hold"), tc.new, lease, tc.req)
			wantReason(t, err, tc.want)
			if err != nil && tc.want == protocol.ReasonInvalid && !strings.Contains(err.Message, "is being deleted") {
				t.Errorf("the refusal does not say the object is being deleted: %s", err.Message)
			}
		})
	}
}
