package elector

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"

	"google.golang.org/protobuf/encoding/protowire"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
)

// leaseRequests sends an elector's requests on its Lease. The Leases returned are trimmed as the watch's
// are (no managedFields, which the elector never reads: an acquisition resets them; a renewal sends none,
// and the apiserver keeps the stored ones) and share with the version the elector holds what they have
// equal (shareHeld): each elector keeps the last one.
type leaseRequests struct {
	leases leaseClient
	// rest sends the renewals (renew): the REST client of client-go's own coordination client, nil when
	// the client is any other implementation (a wrapper that observes or changes its requests, a fake
	// clientset), and then a renewal is an Update through leases, as every other request is.
	rest rest.Interface
	obs  *observer
}

// restOf returns the REST client of c if c is client-go's own coordination client, nil otherwise.
func restOf(c coordinationv1client.CoordinationV1Interface) rest.Interface {
	own, ok := c.(*coordinationv1client.CoordinationV1Client)
	if !ok || own == nil {
		return nil
	}
	rc := own.RESTClient()
	if r, ok := rc.(*rest.RESTClient); rc == nil || ok && r == nil {
		return nil
	}
	return rc
}

func (q leaseRequests) get(ctx context.Context, name string) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Get(ctx, name, metav1.GetOptions{}) })
}

func (q leaseRequests) create(ctx context.Context, l *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Create(ctx, l, opts) })
}

func (q leaseRequests) update(ctx context.Context, l *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Update(ctx, l, opts) })
}

func (q leaseRequests) patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions) (*coordinationv1.Lease, error) {
	return q.answer(func() (*coordinationv1.Lease, error) { return q.leases.Patch(ctx, name, pt, data, opts) })
}

// renew writes l, a renewal of the version the elector holds, by compare-and-swap as an Update presenting
// fieldManager, and returns the version written: l with the answer's resourceVersion. The answer is read
// for its resourceVersion alone (resourceVersionOf), not decoded into a Lease: the elector sent the rest of
// it, and the watch delivers the stored version a moment later, which then replaces it
// (observer.watched). A leader would otherwise decode each of its renewals twice, the answer and the watch
// event. An answer it cannot read so is decoded as the typed client decodes it.
func (q leaseRequests) renew(ctx context.Context, l *coordinationv1.Lease, fieldManager string) (*coordinationv1.Lease, error) {
	if q.rest == nil {
		return q.update(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager})
	}
	var contentType string
	// Protobuf unless the client's config names a content type, as client-go's typed Leases client does.
	res := q.rest.Put().UseProtobufAsDefault().Namespace(l.Namespace).Resource("leases").Name(l.Name).
		Param("fieldManager", fieldManager).Body(l).Do(ctx).ContentType(&contentType)
	if err := res.Error(); err != nil {
		return nil, err
	}
	body, _ := res.Raw()
	if rv, ok := resourceVersionOf(body, contentType); ok {
		written := *l
		written.ResourceVersion = rv
		return &written, nil
	}
	return q.answer(func() (*coordinationv1.Lease, error) {
		obj, err := res.Get()
		if err != nil {
			return nil, err
		}
		answer, ok := obj.(*coordinationv1.Lease)
		if !ok {
			return nil, fmt.Errorf("the renewal of Lease %s/%s was answered with a %T, not a Lease", l.Namespace, l.Name, obj)
		}
		return answer, nil
	})
}

// resourceVersionOf reads the resourceVersion of the Lease in an answer of the given content type
// (Kubernetes protobuf or JSON) without decoding the rest; false if the answer is not a Lease with one.
func resourceVersionOf(body []byte, contentType string) (string, bool) {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "", false
	}
	switch mediaType {
	case runtime.ContentTypeProtobuf:
		return protobufResourceVersion(body)
	case runtime.ContentTypeJSON:
		var lease struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if json.Unmarshal(body, &lease) != nil || lease.Kind != "Lease" || lease.APIVersion != coordinationv1.SchemeGroupVersion.String() ||
			lease.Metadata.ResourceVersion == "" {
			return "", false
		}
		return lease.Metadata.ResourceVersion, true
	}
	return "", false
}

// protobufMagic prefixes every object in Kubernetes' protobuf encoding, which wraps it in a
// runtime.Unknown: typeMeta (1: apiVersion 1, kind 2), raw (2), the object's own encoding.
var protobufMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// Field numbers of the messages protobufResourceVersion walks (k8s.io/apimachinery's and k8s.io/api's
// generated.proto).
const (
	unknownTypeMeta           protowire.Number = 1
	unknownRaw                protowire.Number = 2
	typeMetaAPIVersion        protowire.Number = 1
	typeMetaKind              protowire.Number = 2
	leaseMetadata             protowire.Number = 1
	objectMetaResourceVersion protowire.Number = 6
)

func protobufResourceVersion(body []byte) (string, bool) {
	envelope, ok := bytes.CutPrefix(body, protobufMagic)
	if !ok {
		return "", false
	}
	typeMeta, ok := onlyField(envelope, unknownTypeMeta)
	if !ok {
		return "", false
	}
	if kind, ok := onlyField(typeMeta, typeMetaKind); !ok || string(kind) != "Lease" {
		return "", false
	}
	if v, ok := onlyField(typeMeta, typeMetaAPIVersion); !ok || string(v) != coordinationv1.SchemeGroupVersion.String() {
		return "", false
	}
	raw, ok := onlyField(envelope, unknownRaw)
	if !ok {
		return "", false
	}
	meta, ok := onlyField(raw, leaseMetadata)
	if !ok {
		return "", false
	}
	rv, ok := onlyField(meta, objectMetaResourceVersion)
	if !ok || len(rv) == 0 {
		return "", false
	}
	return string(rv), true
}

// onlyField returns the value of the length-delimited field num of the protobuf message b (a string,
// bytes or a message); false if b holds none, holds it more than once (a decoder would merge or pick, and
// the caller then decodes) or is not a well-formed message.
func onlyField(b []byte, num protowire.Number) ([]byte, bool) {
	var value []byte
	found := false
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, false
		}
		b = b[l:]
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return nil, false
		}
		if n == num {
			if found || typ != protowire.BytesType {
				return nil, false
			}
			value, _ = protowire.ConsumeBytes(b)
			found = true
		}
		b = b[m:]
	}
	return value, found
}

// listRevision lists at most one Lease of the namespace and returns the list's resourceVersion (the
// storage revision, from which an epoch is seeded).
func (q leaseRequests) listRevision(ctx context.Context) (string, error) {
	list, err := q.leases.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	return list.ResourceVersion, nil
}

// answer sends a request that returns the Lease, trims the answer and shares with the held version what
// is equal.
func (q leaseRequests) answer(send func() (*coordinationv1.Lease, error)) (*coordinationv1.Lease, error) {
	l, err := send()
	if l != nil {
		q.obs.adopt(l)
	}
	return l, err
}
