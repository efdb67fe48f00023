package fencing_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
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
}

func (r resource) build() *fencingv1alpha1.FencedResource {
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "orders", Labels: r.labels, Annotations: map[string]string{}},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer", Epoch: r.epoch},
	}
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
			Labels: map[string]string{elector.FencedLabel: "true"},
			Annotations: map[string]string{
				elector.EpochAnnotation:    epoch,
				elector.AcquirerAnnotation: "worker-b-user",
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
	holderUser = fencing.Requester{Username: "worker-b-user", Groups: []string{"system:authenticated"}}
	otherUser  = fencing.Requester{Username: "worker-a-user", Groups: []string{"system:authenticated"}}
)

func refusal(reason fencing.Reason, epoch, leaseEpoch int64, msg string) *fencing.Error {
	return &fencing.Error{Reason: reason, Resource: "ns/orders", Lease: "orders-writer", Epoch: epoch, LeaseEpoch: leaseEpoch, Message: msg}
}

func TestCheckWrite(t *testing.T) {
	// A payload of exactly MaxDataBytes bytes once serialized, and one byte more.
	blob := func(size int) string {
		return `{"blob":"` + strings.Repeat("x", size-len(`{"blob":""}`)) + `"}`
	}
	written := resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-b"}
	tests := map[string]struct {
		old   *resource // nil: a create
		fr    resource
		lease *coordinationv1.Lease
		req   fencing.Requester
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
			old: &resource{}, fr: written, lease: leaseAt("6"), req: holderUser,
		},
		"the holder creates with data at the current epoch": {
			fr: written, lease: leaseAt("6"), req: holderUser,
		},
		"data of exactly MaxDataBytes": {
			old: &written, fr: resource{epoch: 6, data: blob(fencingv1alpha1.MaxDataBytes), writer: "worker-b"}, lease: leaseAt("6"), req: holderUser,
		},
		"renewed exactly one lease duration ago is still live": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: holderUser,
			lease: leaseAt("6", func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-15 * time.Second)))
			}),
		},
		"data change with the lease missing": {
			old: &resource{epoch: 3, data: `{"v":1}`, writer: "worker-b"}, fr: resource{epoch: 3, data: `{"v":2}`, writer: "worker-b"}, req: holderUser,
			want: refusal(fencing.ReasonLeaseMissing, 3, 0,
				"lease orders-writer not found in namespace ns: FencedResource ns/orders cannot be written at epoch 3 until an elector holds that lease"),
		},
		"lease without an epoch annotation": {
			old: &resource{}, fr: written, req: holderUser,
			lease: leaseAt("6", func(l *coordinationv1.Lease) { delete(l.Annotations, elector.EpochAnnotation) }),
			want: refusal(fencing.ReasonLeaseMissing, 6, 0,
				"lease orders-writer cannot fence FencedResource ns/orders: it has no fencing.fencekit.io/epoch annotation (no fencekit elector has acquired it)"),
		},
		"lease with a garbage epoch annotation": {
			old: &resource{}, fr: written, lease: leaseAt("six"), req: holderUser,
			want: refusal(fencing.ReasonLeaseMissing, 6, 0,
				`lease orders-writer cannot fence FencedResource ns/orders: its fencing.fencekit.io/epoch annotation "six" is not an epoch >= 1`),
		},
		"lease at epoch 0": {
			old: &resource{}, fr: resource{data: `{"v":1}`, writer: "worker-b"}, lease: leaseAt("0"), req: holderUser,
			want: refusal(fencing.ReasonLeaseMissing, 0, 0,
				`lease orders-writer cannot fence FencedResource ns/orders: its fencing.fencekit.io/epoch annotation "0" is not an epoch >= 1`),
		},
		"stale epoch": {
			old: &resource{epoch: 5, data: `{"v":"a5"}`, writer: "worker-a"}, fr: resource{epoch: 5, data: `{"v":"a5-late"}`, writer: "worker-a"},
			lease: leaseAt("6"), req: otherUser,
			want: refusal(fencing.ReasonStale, 5, 6, "stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"stale epoch, lease released": {
			old: &resource{epoch: 5, data: `{"v":"a5"}`, writer: "worker-a"}, fr: resource{epoch: 5, data: `{"v":"a5-late"}`, writer: "worker-a"},
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }), req: otherUser,
			want: refusal(fencing.ReasonStale, 5, 6, "stale epoch 5: lease orders-writer is at epoch 6, held by nobody"),
		},
		"stale epoch from a break-glass user": {
			old: &resource{epoch: 5, data: `{"v":"a5"}`, writer: "worker-a"}, fr: resource{epoch: 5, data: `{"v":"admin"}`, writer: "worker-a"},
			lease: leaseAt("6"), req: fencing.Requester{Username: "oncall", Groups: []string{fencing.BreakGlassGroup}},
			want: refusal(fencing.ReasonStale, 5, 6, "stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"future epoch": {
			old: &written, fr: resource{epoch: 7, data: `{"v":"b7"}`, writer: "worker-b"}, lease: leaseAt("6"), req: holderUser,
			want: refusal(fencing.ReasonFutureEpoch, 7, 6, "epoch 7 was never issued: lease orders-writer is at epoch 6, held by worker-b"),
		},
		"released lease (empty holder)": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: holderUser,
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }),
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				"lease orders-writer at epoch 6 has no holder (it was released): nobody may write FencedResource ns/orders"),
		},
		"expired lease": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: holderUser,
			lease: leaseAt("6", func(l *coordinationv1.Lease) {
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-20*time.Second - 250*time.Millisecond)))
			}),
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				"lease orders-writer at epoch 6 expired 5.25s ago (held by worker-b, last renewed 2026-11-30T08:59:39.75Z, duration 15s)"),
		},
		"lease without renewTime": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: holderUser,
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil }),
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				"lease orders-writer at epoch 6 has no valid renewTime or leaseDurationSeconds: its holder worker-b cannot be shown to be live"),
		},
		"lease without leaseDurationSeconds": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: holderUser,
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = nil }),
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				"lease orders-writer at epoch 6 has no valid renewTime or leaseDurationSeconds: its holder worker-b cannot be shown to be live"),
		},
		"lease with leaseDurationSeconds 0": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-b"}, req: holderUser,
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](0) }),
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				"lease orders-writer at epoch 6 has no valid renewTime or leaseDurationSeconds: its holder worker-b cannot be shown to be live"),
		},
		"wrong writer annotation": {
			old: &written, fr: resource{epoch: 6, data: `{"v":2}`, writer: "worker-x"}, lease: leaseAt("6"), req: holderUser,
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				`write names holder "worker-x" (annotation fencing.fencekit.io/writer) but lease orders-writer at epoch 6 is held by worker-b`),
		},
		"no writer annotation": {
			old: &resource{}, fr: resource{epoch: 6, data: `{"v":2}`}, lease: leaseAt("6"), req: holderUser,
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				`write names holder "" (annotation fencing.fencekit.io/writer) but lease orders-writer at epoch 6 is held by worker-b`),
		},
		"only the writer annotation changes": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"b6"}`, writer: "worker-x"}, lease: leaseAt("6"), req: holderUser,
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				`write names holder "worker-x" (annotation fencing.fencekit.io/writer) but lease orders-writer at epoch 6 is held by worker-b`),
		},
		"wrong user with the holder's token": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"copied"}`, writer: "worker-b"}, lease: leaseAt("6"), req: otherUser,
			want: refusal(fencing.ReasonNotHolder, 6, 6,
				`user "worker-a-user" is not the user that acquired lease orders-writer at epoch 6 ("worker-b-user"): only the holder worker-b may write FencedResource ns/orders`),
		},
		"break-glass group writes at the current epoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"fixed"}`, writer: "worker-b"}, lease: leaseAt("6"),
			req: fencing.Requester{Username: "oncall", Groups: []string{"system:authenticated", fencing.BreakGlassGroup}},
		},
		"system:masters writes at the current epoch": {
			old: &written, fr: resource{epoch: 6, data: `{"v":"fixed"}`, writer: "worker-b"}, lease: leaseAt("6"),
			req: fencing.Requester{Username: "kubernetes-admin", Groups: []string{"system:masters"}},
		},
		"data over MaxDataBytes": {
			old: &written, fr: resource{epoch: 6, data: blob(fencingv1alpha1.MaxDataBytes + 1), writer: "worker-b"}, lease: leaseAt("6"), req: holderUser,
			want: refusal(fencing.ReasonInvalid, 6, 0,
				"FencedResource ns/orders: spec.data is 262145 bytes, over the bound of 262144 bytes"),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var old *fencingv1alpha1.FencedResource
			if tc.old != nil {
				old = tc.old.build()
			}
			got := fencing.CheckWrite(old, tc.fr.build(), tc.lease, tc.req, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CheckWrite() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckDelete(t *testing.T) {
	expired := func(l *coordinationv1.Lease) { l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now.Add(-time.Minute))) }
	tests := map[string]struct {
		lease *coordinationv1.Lease
		req   fencing.Requester
		want  *fencing.Error
	}{
		"no lease":                    {req: otherUser},
		"the holder's user":           {lease: leaseAt("6"), req: holderUser},
		"another user, expired lease": {lease: leaseAt("6", expired), req: otherUser},
		"another user, released lease": {
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") }), req: otherUser,
		},
		"another user, lease with a garbage epoch": {lease: leaseAt("x"), req: otherUser},
		"kube-system's garbage collector": {
			lease: leaseAt("6"), req: fencing.Requester{Username: "system:serviceaccount:kube-system:generic-garbage-collector"},
		},
		"an admin (system:masters)": {
			lease: leaseAt("6"), req: fencing.Requester{Username: "kubernetes-admin", Groups: []string{"system:masters"}},
		},
		"break-glass group": {
			lease: leaseAt("6"), req: fencing.Requester{Username: "oncall", Groups: []string{fencing.BreakGlassGroup}},
		},
		"another user, live lease": {
			lease: leaseAt("6"), req: otherUser,
			want: refusal(fencing.ReasonNotHolder, 4, 6,
				`FencedResource ns/orders is bound to lease orders-writer, held by worker-b at epoch 6: only that holder's user "worker-b-user" or an admin (group fencekit:breakglass) may delete it`),
		},
		"a service account of another namespace, live lease": {
			lease: leaseAt("6"), req: fencing.Requester{Username: "system:serviceaccount:default:generic-garbage-collector"},
			want: refusal(fencing.ReasonNotHolder, 4, 6,
				`FencedResource ns/orders is bound to lease orders-writer, held by worker-b at epoch 6: only that holder's user "worker-b-user" or an admin (group fencekit:breakglass) may delete it`),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fr := resource{epoch: 4, data: `{"v":1}`, writer: "worker-a"}.build()
			if diff := cmp.Diff(tc.want, fencing.CheckDelete(fr, tc.lease, tc.req, now)); diff != "" {
				t.Errorf("CheckDelete() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTouchesFencedFields(t *testing.T) {
	base := resource{epoch: 3, data: `{"a":1,"b":[1,2]}`, writer: "w"}
	tests := map[string]struct {
		old  *resource
		new  resource
		want bool
	}{
		"create: declaration":           {new: resource{}, want: false},
		"create: null data":             {new: resource{data: "null"}, want: false},
		"create: labels":                {new: resource{labels: map[string]string{"a": "b"}}, want: false},
		"create: empty object data":     {new: resource{data: "{}"}, want: true},
		"create: data":                  {new: resource{data: `{"a":1}`}, want: true},
		"create: epoch":                 {new: resource{epoch: 1}, want: true},
		"create: writer annotation":     {new: resource{writer: "w"}, want: true},
		"update: nothing":               {old: &base, new: base, want: false},
		"update: labels":                {old: &base, new: resource{epoch: 3, data: `{"a":1,"b":[1,2]}`, writer: "w", labels: map[string]string{"x": "y"}}, want: false},
		"update: another annotation":    {old: &base, new: resource{epoch: 3, data: `{"a":1,"b":[1,2]}`, writer: "w", annots: map[string]string{"x": "y"}}, want: false},
		"update: data re-serialized":    {old: &base, new: resource{epoch: 3, data: `{ "b": [1, 2], "a": 1.0 }`, writer: "w"}, want: false},
		"update: data changed":          {old: &base, new: resource{epoch: 3, data: `{"a":1,"b":[2,1]}`, writer: "w"}, want: true},
		"update: data removed":          {old: &base, new: resource{epoch: 3, writer: "w"}, want: true},
		"update: data null to none":     {old: &resource{data: "null"}, new: resource{}, want: false},
		"update: data not JSON":         {old: &base, new: resource{epoch: 3, data: `{"a":`, writer: "w"}, want: true},
		"update: epoch raised":          {old: &base, new: resource{epoch: 4, data: `{"a":1,"b":[1,2]}`, writer: "w"}, want: true},
		"update: writer changed":        {old: &base, new: resource{epoch: 3, data: `{"a":1,"b":[1,2]}`, writer: "v"}, want: true},
		"update: writer removed":        {old: &base, new: resource{epoch: 3, data: `{"a":1,"b":[1,2]}`}, want: true},
		"update: declaration, no data":  {old: &resource{}, new: resource{labels: map[string]string{"x": "y"}}, want: false},
		"update: first data written":    {old: &resource{}, new: resource{data: `{"a":1}`}, want: true},
		"update: first epoch, no data":  {old: &resource{}, new: resource{epoch: 1}, want: true},
		"update: empty object and none": {old: &resource{data: "{}"}, new: resource{}, want: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var old *fencingv1alpha1.FencedResource
			if tc.old != nil {
				old = tc.old.build()
			}
			if got := fencing.TouchesFencedFields(old, tc.new.build()); got != tc.want {
				t.Errorf("TouchesFencedFields() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestViewLease(t *testing.T) {
	renewed := now.Add(-5 * time.Second)
	tests := map[string]struct {
		lease *coordinationv1.Lease
		want  fencing.LeaseView
	}{
		"an acquired lease": {
			lease: leaseAt("6"),
			want: fencing.LeaseView{Name: "orders-writer", Epoch: 6, Holder: "worker-b", Acquirer: "worker-b-user",
				RenewTime: renewed, Duration: 15 * time.Second},
		},
		"no annotations at all (a plain client-go lease)": {
			lease: leaseAt("6", func(l *coordinationv1.Lease) { l.Annotations = nil }),
			want: fencing.LeaseView{Name: "orders-writer", Holder: "worker-b", RenewTime: renewed, Duration: 15 * time.Second,
				EpochErr: "it has no fencing.fencekit.io/epoch annotation (no fencekit elector has acquired it)"},
		},
		"garbage epoch": {
			lease: leaseAt("six"),
			want: fencing.LeaseView{Name: "orders-writer", Holder: "worker-b", Acquirer: "worker-b-user", RenewTime: renewed, Duration: 15 * time.Second,
				EpochErr: `its fencing.fencekit.io/epoch annotation "six" is not an epoch >= 1`},
		},
		"empty epoch": {
			lease: leaseAt(""),
			want: fencing.LeaseView{Name: "orders-writer", Holder: "worker-b", Acquirer: "worker-b-user", RenewTime: renewed, Duration: 15 * time.Second,
				EpochErr: `its fencing.fencekit.io/epoch annotation "" is not an epoch >= 1`},
		},
		"negative epoch": {
			lease: leaseAt("-3"),
			want: fencing.LeaseView{Name: "orders-writer", Holder: "worker-b", Acquirer: "worker-b-user", RenewTime: renewed, Duration: 15 * time.Second,
				EpochErr: `its fencing.fencekit.io/epoch annotation "-3" is not an epoch >= 1`},
		},
		"epoch beyond int64": {
			lease: leaseAt("9223372036854775808"),
			want: fencing.LeaseView{Name: "orders-writer", Holder: "worker-b", Acquirer: "worker-b-user", RenewTime: renewed, Duration: 15 * time.Second,
				EpochErr: `its fencing.fencekit.io/epoch annotation "9223372036854775808" is not an epoch >= 1`},
		},
		"largest epoch": {
			lease: leaseAt("9223372036854775807"),
			want: fencing.LeaseView{Name: "orders-writer", Epoch: 9223372036854775807, Holder: "worker-b", Acquirer: "worker-b-user",
				RenewTime: renewed, Duration: 15 * time.Second},
		},
		"released, never renewed, no duration": {
			lease: leaseAt("2", func(l *coordinationv1.Lease) {
				l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = nil, nil, nil
			}),
			want: fencing.LeaseView{Name: "orders-writer", Epoch: 2, Acquirer: "worker-b-user"},
		},
		"negative duration": {
			lease: leaseAt("2", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](-1) }),
			want:  fencing.LeaseView{Name: "orders-writer", Epoch: 2, Holder: "worker-b", Acquirer: "worker-b-user", RenewTime: renewed},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, fencing.ViewLease(tc.lease)); diff != "" {
				t.Errorf("ViewLease() (-want +got):\n%s", diff)
			}
		})
	}
}
