package elector

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// A request's answer reaches the elector without its managedFields, with the request's error, and shares
// with the version the elector holds the annotations it has equal.
func TestAnswerIsTrimmedAndSharesTheHeldVersion(t *testing.T) {
	o := newObserver("l", clocktesting.NewFakePassiveClock(metav1.Now().Time))
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", UID: "u1", ResourceVersion: "6",
		Annotations: map[string]string{protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: "alice"}}}
	o.set(held)
	q := leaseRequests{obs: o}
	sent := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Annotations:   map[string]string{protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: "alice"},
		Labels:        map[string]string{protocol.FencedLabel: "true"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "fencing.fencekit.io/epoch=3"}}}}
	errConflict := errors.New("conflict")
	got, err := q.answer(func() (*coordinationv1.Lease, error) { return sent, errConflict })
	if got != sent || !errors.Is(err, errConflict) {
		t.Fatalf("answer returned %v, %v; want the request's Lease and error", got, err)
	}
	if got.ManagedFields != nil {
		t.Errorf("managedFields %v kept, want none", got.ManagedFields)
	}
	if !sameMap(got.Annotations, held.Annotations) {
		t.Errorf("the answer's annotations %v are a map of their own, want the held version's", got.Annotations)
	}
	if !sameMap(got.Labels, fencedLabels) {
		t.Errorf("the answer's labels %v are a map of their own, want the shared fenced labels", got.Labels)
	}
	if got.ResourceVersion != "7" {
		t.Errorf("resourceVersion %q, want the answer's 7", got.ResourceVersion)
	}
	if got, err := q.answer(func() (*coordinationv1.Lease, error) { return nil, errConflict }); got != nil || !errors.Is(err, errConflict) {
		t.Errorf("answer of a failed request: %v, %v; want nil, the error", got, err)
	}
}

// A fresh version shares the held version's name, namespace, uid and annotations map only when they are
// equal, and only with a version of the same object; what it shares keeps its own values.
func TestShareHeld(t *testing.T) {
	annotations := func(epoch string) map[string]string {
		return map[string]string{protocol.EpochAnnotation: epoch, protocol.AcquirerAnnotation: "alice"}
	}
	version := func(uid types.UID, epoch string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", UID: uid, ResourceVersion: "9",
			Annotations: annotations(epoch)}}
	}
	held := version("u1", "3")
	cases := []struct {
		name  string
		fresh *coordinationv1.Lease
		held  *coordinationv1.Lease
		share bool
	}{
		{"a renewal", version("u1", "3"), held, true},
		{"an acquisition at another epoch", version("u1", "4"), held, false},
		{"the Lease deleted and created again", version("u2", "3"), held, false},
		{"nothing held", version("u1", "3"), nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := maps.Clone(tc.fresh.Annotations)
			shareHeld(tc.fresh, tc.held)
			if shared := tc.held != nil && sameMap(tc.fresh.Annotations, tc.held.Annotations); shared != tc.share {
				t.Errorf("annotations shared = %t, want %t", shared, tc.share)
			}
			if !maps.Equal(tc.fresh.Annotations, want) || tc.fresh.Name != "l" || tc.fresh.Namespace != "ns" || tc.fresh.ResourceVersion != "9" {
				t.Errorf("the fresh version changed: %+v, annotations want %v", tc.fresh.ObjectMeta, want)
			}
			if !maps.Equal(held.Annotations, annotations("3")) {
				t.Errorf("the held version changed: %v", held.Annotations)
			}
		})
	}
}

// A renewal shares the held Lease's maps and writes nothing of it: the held version, which the observer
// and the informer's store hold too, is unchanged, and the renewal carries the new renewTime and
// leaseDurationSeconds.
func TestRenewalLeavesTheHeldLeaseAsItWas(t *testing.T) {
	acquired := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	held := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "ns", UID: "u1", ResourceVersion: "7",
		Labels:      map[string]string{protocol.FencedLabel: "true"},
		Annotations: map[string]string{protocol.EpochAnnotation: "3"}}}
	applyAcquisition(held, acquisition{identity: "a", acquirer: "a", epoch: 3, leaseDuration: 15 * time.Second, now: acquired})
	before := held.DeepCopy()
	renewed := acquired.Add(2 * time.Second)
	l := renewalOf(held, renewed, 20*time.Second)
	if diff := cmp.Diff(before, held); diff != "" {
		t.Errorf("the held Lease changed with its renewal (-before +after):\n%s", diff)
	}
	if got := l.Spec.RenewTime; got == nil || !got.Time.Equal(renewed) {
		t.Errorf("the renewal's renewTime is %v, want %v", got, renewed)
	}
	if got := l.Spec.LeaseDurationSeconds; got == nil || *got != 20 {
		t.Errorf("the renewal's leaseDurationSeconds is %v, want 20", got)
	}
	if l.Spec.AcquireTime != held.Spec.AcquireTime || l.Spec.HolderIdentity != held.Spec.HolderIdentity {
		t.Errorf("the renewal does not carry the held holder and acquireTime: %+v", l.Spec)
	}
}

// A renewal's answer is read for the Lease's resourceVersion in both encodings the apiserver answers in;
// an answer that is not one Lease with one resourceVersion is not read so (the renewal then decodes it).
func TestResourceVersionOfAnAnswer(t *testing.T) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: "ns", UID: "u1", ResourceVersion: "4711",
		Labels:        map[string]string{protocol.FencedLabel: "true"},
		Annotations:   map[string]string{protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: "alice"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: protocol.FieldManagerFor(3), Operation: metav1.ManagedFieldsOperationUpdate}}}}
	applyAcquisition(lease, acquisition{identity: "a", acquirer: "alice", epoch: 3, leaseDuration: 15 * time.Second, now: time.Now()})
	lease.ResourceVersion = "4711"
	encodeAs := func(info runtime.SerializerInfo, gv schema.GroupVersion, obj runtime.Object) []byte {
		t.Helper()
		b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, gv), obj)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	encode := func(info runtime.SerializerInfo, obj runtime.Object) []byte {
		t.Helper()
		b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, coordinationv1.SchemeGroupVersion), obj)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	serializer := func(mediaType string) runtime.SerializerInfo {
		info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
		if !ok {
			t.Fatalf("no serializer for %s", mediaType)
		}
		return info
	}
	pb, js := serializer(runtime.ContentTypeProtobuf), serializer(runtime.ContentTypeJSON)
	noVersion := lease.DeepCopy()
	noVersion.ResourceVersion = ""
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess,
		ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}
	statusJSON, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	leaseProto := encode(pb, lease)
	// The envelope's raw field twice: a decoder keeps one of them, this reading none.
	twice := append(slices.Clone(leaseProto), protowire.AppendTag(nil, unknownRaw, protowire.BytesType)...)
	twice = protowire.AppendBytes(twice, []byte{})
	cases := []struct {
		name, contentType string
		body              []byte
		want              string
		ok                bool
	}{
		{"protobuf", pb.MediaType, leaseProto, "4711", true},
		{"protobuf with parameters", pb.MediaType + "; charset=binary", leaseProto, "4711", true},
		{"JSON", js.MediaType, encode(js, lease), "4711", true},
		{"JSON with a charset", js.MediaType + ";charset=utf-8", encode(js, lease), "4711", true},
		{"protobuf without a resourceVersion", pb.MediaType, encode(pb, noVersion), "", false},
		{"JSON without a resourceVersion", js.MediaType, encode(js, noVersion), "", false},
		{"a Status in JSON", js.MediaType, statusJSON, "", false},
		{"a Status in protobuf", pb.MediaType, encodeAs(pb, metav1.SchemeGroupVersion, status), "", false},
		{"a ConfigMap in protobuf", pb.MediaType, encodeAs(pb, corev1.SchemeGroupVersion,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders", ResourceVersion: "4711"}}), "", false},
		{"a ConfigMap in JSON", js.MediaType, encodeAs(js, corev1.SchemeGroupVersion,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders", ResourceVersion: "4711"}}), "", false},
		{"a LeaseList in protobuf", pb.MediaType, encode(pb, &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "4711"},
			Items: []coordinationv1.Lease{*lease}}), "", false},
		{"protobuf with its raw field twice", pb.MediaType, twice, "", false},
		{"protobuf cut short", pb.MediaType, leaseProto[:len(leaseProto)-5], "", false},
		{"protobuf without its magic", pb.MediaType, leaseProto[4:], "", false},
		{"protobuf labelled JSON", js.MediaType, leaseProto, "", false},
		{"YAML", "application/yaml", []byte("kind: Lease\nmetadata:\n  resourceVersion: \"4711\"\n"), "", false},
		{"no content type", "", leaseProto, "", false},
		{"an empty body", pb.MediaType, nil, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := resourceVersionOf(tc.body, tc.contentType)
			if got != tc.want || ok != tc.ok {
				t.Errorf("resourceVersionOf = %q, %t; want %q, %t", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// Renewals go through the REST client of client-go's own coordination client, and through the typed
// client of any other implementation (a wrapper that observes its requests, a fake clientset).
func TestRestOf(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if restOf(cs.CoordinationV1()) == nil {
		t.Error("no REST client for client-go's own coordination client")
	}
	if got := restOf(observedCoordination{cs.CoordinationV1()}); got != nil {
		t.Errorf("restOf a wrapper of the coordination client = %v, want nil: its Leases would be bypassed", got)
	}
	if got := restOf((*coordinationv1client.CoordinationV1Client)(nil)); got != nil {
		t.Errorf("restOf a nil coordination client = %v, want nil", got)
	}
}

// observedCoordination is a wrapper of a coordination client, as a user's instrumented clientset returns.
type observedCoordination struct {
	coordinationv1client.CoordinationV1Interface
}
