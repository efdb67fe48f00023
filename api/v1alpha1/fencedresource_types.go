package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

const (
	// MaxDataBytes bounds the serialized size of spec.data. The CRD cannot measure bytes (CEL counts the
	// keys of a free-form object, not its size), so the fencekit admission webhook enforces it; the CRD
	// itself bounds the number of top-level keys with MaxDataKeys.
	MaxDataBytes = 256 * 1024

	// MaxDataKeys bounds the number of top-level keys of spec.data, enforced by the CRD schema.
	MaxDataKeys = 256

	// WriterAnnotation names the Lease holder identity that made the last fenced write. The fenced writer in
	// pkg/fencing sets it on every write; the admission webhook admits a fenced write only if it names the
	// Lease's current holder (and changing it is itself fenced), and the operator reports it as status.holder.
	WriterAnnotation = "fencing.fencekit.io/writer"

	// DeleteAtEpochAnnotation is the fenced deletion marker: the holder writes it, with its fencing token,
	// set to the epoch it holds ("7"), and then deletes the resource. While the bound Lease has a live holder
	// the admission webhook admits a delete only from the acquiring user and only if this marker equals the
	// Lease's current epoch, so that a stale replica of the same user (whose delete cannot carry a token)
	// cannot delete the live holder's resource. Changing it needs the token, like spec.data.
	DeleteAtEpochAnnotation = "fencing.fencekit.io/delete-at-epoch"

	// HoldAtEpochAnnotation is the holder's hold on a FencedResource or a covered object: pkg/fencing's
	// clients set it, with the token, to the epoch they hold when a compare-and-swap write (one that carries
	// the resourceVersion it read) lost to another write, and every later fenced write removes it. While it
	// equals the bound Lease's current epoch, the admission webhook refuses writes without the token to the
	// object, so that a loop of free writes (a label, a finalizer) cannot starve the holder's next
	// read-and-write. Changing it needs the token.
	HoldAtEpochAnnotation = "fencing.fencekit.io/hold-at-epoch"

	// MaxEpoch is the highest epoch a FencedResource stores: 2^53-1, as pkg/protocol.MaxEpoch (api/v1alpha1
	// imports nothing of fencekit; a test checks that the two agree).
	MaxEpoch int64 = 1<<53 - 1
)

// FencedResourceSpec is what a user declares and what the lease holder writes.
//
// The apiserver keeps spec.epoch and spec.raisedEpoch monotonic on its own (the CEL rules below run inside
// the apiserver's update, against the stored object), so a write carrying an epoch below the stored one,
// or below the one a declaration was raised to, is rejected even when no webhook is installed.
// +kubebuilder:validation:XValidation:rule="self.epoch == 0 || !has(self.raisedEpoch) || self.epoch >= self.raisedEpoch",messageExpression="'stale epoch %d: fence-on-acquire raised this FencedResource to epoch %d before it held data'.format([self.epoch, self.raisedEpoch])",reason=FieldValueForbidden,fieldPath=".epoch"
type FencedResourceSpec struct {
	// leaseName is the name of the coordination.k8s.io/v1 Lease, in the same namespace, whose holder may
	// write this resource. Writes must carry that Lease's current epoch. It is a DNS-1123 subdomain and
	// cannot be changed once set.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="leaseName is immutable: create a new FencedResource to bind another Lease"
	LeaseName string `json:"leaseName"`

	// epoch is the fencing token carried by the writer: the epoch of the Lease acquisition that authorised
	// the write. It never decreases: the apiserver rejects any write whose epoch is below the stored one.
	// Absent means 0, the epoch of a resource that no holder has written yet. At most 9007199254740991
	// (2^53-1), the highest epoch fencekit issues.
	// +optional
	// +default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9007199254740991
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",messageExpression="'stale epoch %d: this FencedResource has already admitted epoch %d'.format([self, oldSelf])",reason=FieldValueForbidden
	Epoch int64 `json:"epoch,omitempty"`

	// raisedEpoch is the epoch fence-on-acquire raised this resource to while it held no data and spec.epoch
	// was 0 (a declaration): a write of that epoch or above may then set data and spec.epoch, an earlier
	// one may not. spec.epoch stays 0, so that every acquisition lists a declaration within its budget
	// whoever created it. It never decreases. Absent means 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9007199254740991
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",messageExpression="'stale epoch %d: this FencedResource was already raised to epoch %d'.format([self, oldSelf])",reason=FieldValueForbidden
	RaisedEpoch int64 `json:"raisedEpoch,omitempty"`

	// data is the protected payload: a JSON object of the user's choosing, stored as is. It holds at most
	// 256 top-level keys (enforced by the schema) and at most 262144 bytes once serialized (enforced by the
	// fencekit admission webhook). Only the current lease holder may set or change it, in a request whose
	// fieldManager is fencing.fencekit.io/epoch=<its epoch>.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MaxProperties=256
	// +kubebuilder:pruning:PreserveUnknownFields
	Data *runtime.RawExtension `json:"data,omitempty"`
}

// FencedEpoch is the epoch below which the resource refuses writes: spec.epoch, or spec.raisedEpoch for a
// declaration fence-on-acquire raised.
func (s *FencedResourceSpec) FencedEpoch() int64 {
	return max(s.Epoch, s.RaisedEpoch)
}

// FencedResourceStatus is what the fencekit operator observed. Users read it; only the operator writes it.
type FencedResourceStatus struct {
	// admittedEpoch is the highest epoch this resource has admitted, as last observed by the operator.
	// +optional
	// +kubebuilder:validation:Minimum=0
	AdmittedEpoch int64 `json:"admittedEpoch,omitempty"`

	// holder is the Lease holder identity that made the write at admittedEpoch, if a holder wrote data.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Holder string `json:"holder,omitempty"`

	// leaseEpoch is the bound Lease's current epoch, as last observed by the operator.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LeaseEpoch int64 `json:"leaseEpoch,omitempty"`

	// leaseHolder is the bound Lease's current holder identity, as last observed; empty when nobody holds it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	LeaseHolder string `json:"leaseHolder,omitempty"`

	// observedGeneration is the metadata.generation this status was computed from.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions describe the resource's state: Ready, LeaseFound and Fenced. Their reasons are listed in
	// conditions.go.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FencedResource is a resource whose writes are fenced: a write that sets or changes spec.data,
// spec.epoch, the writer annotation, the deletion marker or owner references is admitted only if the
// request presents the bound Lease's current epoch as its field manager ("fencing.fencekit.io/epoch=N")
// and comes from its holder.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fr,categories=fencekit
// +kubebuilder:selectablefield:JSONPath=`.spec.leaseName`
// +kubebuilder:selectablefield:JSONPath=`.spec.epoch`
// +kubebuilder:printcolumn:name="Lease",type=string,JSONPath=`.spec.leaseName`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.spec.epoch`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.leaseHolder`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Raised",type=integer,JSONPath=`.spec.raisedEpoch`,priority=1,description="The epoch fence-on-acquire raised a declaration to"
// +kubebuilder:printcolumn:name="Lease Epoch",type=integer,JSONPath=`.status.leaseEpoch`,priority=1,description="The bound Lease's current epoch"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1,description="Why the resource is Ready or not"
type FencedResource struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the binding to a Lease and the fenced payload.
	// +required
	Spec FencedResourceSpec `json:"spec"`

	// status is what the fencekit operator observed.
	// +optional
	Status FencedResourceStatus `json:"status,omitempty"`
}

// FencedResourceList is a list of FencedResources.
//
// +kubebuilder:object:root=true
type FencedResourceList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the FencedResources.
	Items []FencedResource `json:"items"`
}
