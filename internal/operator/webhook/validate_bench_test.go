package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// leaseReader serves one Lease from memory, so that the benchmark measures the handler's own work.
type leaseReader struct{ lease *coordinationv1.Lease }

func (r leaseReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.lease.DeepCopyInto(obj.(*coordinationv1.Lease))
	return nil
}

func (leaseReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return nil }

// BenchmarkValidateUpdate measures the handler's own work (decoding the request and deciding it) for a
// holder's write that replaces spec.data of the given size (the Lease read served from memory): what the
// webhook adds on top of its Lease read.
func BenchmarkValidateUpdate(b *testing.B) {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "writer", Labels: map[string]string{protocol.FencedLabel: "true"}, Annotations: map[string]string{
			protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: "holder-user",
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("holder"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &now},
	}
	v := NewFencedResourceValidator(leaseReader{lease})
	for _, size := range []int{64, 16 << 10, 200 << 10} {
		b.Run(fmt.Sprintf("data=%dB", size), func(b *testing.B) {
			old, err := json.Marshal(resource(size, "a"))
			if err != nil {
				b.Fatal(err)
			}
			fr, err := json.Marshal(resource(size, "b"))
			if err != nil {
				b.Fatal(err)
			}
			req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: admissionv1.Update, Namespace: "ns", Name: "fr", Kind: metav1.GroupVersionKind{Kind: "FencedResource"},
				UserInfo:  authenticationv1.UserInfo{Username: "holder-user"},
				Options:   runtime.RawExtension{Raw: []byte(`{"kind":"PatchOptions","apiVersion":"meta.k8s.io/v1","fieldManager":"` + protocol.FieldManagerFor(3) + `"}`)},
				OldObject: runtime.RawExtension{Raw: old}, Object: runtime.RawExtension{Raw: fr},
			}}
			b.ReportAllocs()
			for b.Loop() {
				if resp := v.Handle(context.Background(), req); !resp.Allowed {
					b.Fatal(resp.Result)
				}
			}
		})
	}
}

// resource is a FencedResource at epoch 3 written by holder, whose data is about size bytes of JSON
// (keys k0, k1, ... holding strings that start with tag).
func resource(size int, tag string) *fencingv1alpha1.FencedResource {
	var sb strings.Builder
	sb.WriteString("{")
	for i := 0; sb.Len() < size; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(strconv.Quote("k"+strconv.Itoa(i)) + ":" + strconv.Quote(tag+strings.Repeat("x", 60)))
	}
	sb.WriteString("}")
	return &fencingv1alpha1.FencedResource{
		TypeMeta:   metav1.TypeMeta{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedResource"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "fr", Annotations: map[string]string{fencingv1alpha1.WriterAnnotation: "holder"}},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "writer", Epoch: 3, Data: &runtime.RawExtension{Raw: []byte(sb.String())}},
	}
}
