package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencekit/fencekit/pkg/protocol"
)

const (
	// ObjectEpochAnnotation is the epoch of the last fenced write of an object declared by a FencingPolicy.
	// Every fenced create and update sets it to the epoch the request presents (its field manager
	// fencing.fencekit.io/epoch=N), which must be the Lease's current epoch, and every acquisition's
	// fence-on-acquire writes it, so that a record the Lease issued never goes down. It is a record, never a
	// token: the token is always the request's field manager. It is the key of the Lease's epoch.
	ObjectEpochAnnotation = protocol.EpochAnnotation

	// MaxPolicyResources bounds spec.resources of a FencingPolicy.
	MaxPolicyResources = 16
)

// ClusterOwned reports whether the object group/resource/name is one the cluster itself keeps in every
// namespace, which no FencingPolicy covers whatever its selector: ConfigMap kube-root-ca.crt, the
// cluster's CA bundle, which root-ca-cert-publisher recreates and every Pod that mounts a ServiceAccount
// token needs.
func ClusterOwned(group, resource, name string) bool {
	return group == "" && resource == "configmaps" && name == "kube-root-ca.crt"
}

// FencedObjects names resources of one API group, in the FencingPolicy's namespace, that only the holder
// of the policy's Lease may write.
//
// +kubebuilder:validation:XValidation:rule="!(self.group == 'coordination.k8s.io' && self.resource == 'leases')",message="leases cannot be fenced by a FencingPolicy: fencekit's own Lease policy guards fenced Leases"
// +kubebuilder:validation:XValidation:rule="!((size(self.group) == 0 || self.group == 'events.k8s.io') && self.resource == 'events')",message="events cannot be fenced: every component records them"
// +kubebuilder:validation:XValidation:rule="self.group != 'fencing.fencekit.io'",message="fencekit's own kinds (group fencing.fencekit.io) cannot be fenced by a FencingPolicy: FencedResources are fenced already"
// +kubebuilder:validation:XValidation:rule="!(self.group in ['authentication.k8s.io', 'authorization.k8s.io', 'admissionregistration.k8s.io', 'apiregistration.k8s.io', 'apiextensions.k8s.io', 'rbac.authorization.k8s.io', 'certificates.k8s.io', 'flowcontrol.apiserver.k8s.io', 'node.k8s.io', 'scheduling.k8s.io', 'storage.k8s.io'])",messageExpression="'group %s cannot be fenced: its objects are cluster-scoped, virtual (reviews) or guard the apiserver and admission itself'.format([self.group])"
// +kubebuilder:validation:XValidation:rule="!(size(self.group) == 0 && self.resource in ['namespaces', 'nodes', 'persistentvolumes', 'componentstatuses', 'bindings', 'serviceaccounts'])",messageExpression="'core resource %s cannot be fenced: it is cluster-scoped, virtual, or its tokens are written by kube-controller-manager'.format([self.resource])"
type FencedObjects struct {
	// group is the API group of the resource: "" for the core group (ConfigMaps, Services), "apps" for
	// Deployments. Every version of the resource is fenced.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Group string `json:"group"`

	// resource is the plural, lower-case resource name ("configmaps", "deployments"), as in RBAC rules. Its
	// subresources are fenced with it (status, scale, eviction...). A wildcard is not accepted.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="resource must be the plural, lower-case resource name, as in RBAC rules (\"deployments\", not \"Deployment\"): lower-case letters, digits and '-'"
	Resource string `json:"resource"`

	// selector restricts the policy to the objects whose labels match it; absent means every object of the
	// resource in the namespace. An object is fenced if its labels match before or after a write, so that
	// changing a label cannot take an object out of the policy without the token.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// FencingPolicySpec declares which objects of the namespace only the holder of a Lease may write.
type FencingPolicySpec struct {
	// leaseName is the coordination.k8s.io/v1 Lease, in the same namespace, whose holder alone may create,
	// update, patch (status and other subresources included) and delete the declared objects. Each such write
	// presents the Lease's current epoch as its field manager (fencing.fencekit.io/epoch=N) and comes from the
	// user that acquired it. It cannot be changed once set.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="leaseName is immutable: create a new FencingPolicy to bind another Lease"
	LeaseName string `json:"leaseName"`

	// resources are the fenced resources, at most 16; each group and resource at most once.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, a.group == b.group && a.resource == b.resource))",message="each group and resource may appear only once in resources: merge their selectors or write a second FencingPolicy for the same Lease"
	Resources []FencedObjects `json:"resources"`
}

// FencingPolicyStatus is what the fencekit operator observed. Only the operator writes it.
type FencingPolicyStatus struct {
	// observedGeneration is the metadata.generation this status was computed from.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// leaseEpoch is the bound Lease's current epoch, as last observed by the operator.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LeaseEpoch int64 `json:"leaseEpoch,omitempty"`

	// coverageGeneration is the metadata.generation whose declared objects coverageEpoch speaks for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CoverageGeneration int64 `json:"coverageGeneration,omitempty"`

	// coverageEpoch is the bound Lease's epoch read from the apiserver (not from a cache) after the
	// operator observed metadata.generation coverageGeneration (0 if the Lease did not exist): every
	// acquisition above it listed the objects this generation declares, and its fence-on-acquire raised
	// them. The webhook decides a write of a declared object on its copy of the Lease only at an epoch
	// above coverageEpoch, and only while coverageGeneration is the policy's generation; otherwise it reads
	// the Lease from the apiserver. A policy created or changed while a Lease is held takes its fast path
	// from the next acquisition on.
	// +optional
	// +kubebuilder:validation:Minimum=0
	CoverageEpoch int64 `json:"coverageEpoch,omitempty"`

	// conditions describe the policy's state; Ready is True once the fencekit webhook is configured for
	// every declared resource of the namespace and the Lease exists. Reasons are listed in conditions.go.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FencingPolicy declares objects of its namespace (by group, resource and optional label selector) that
// only the holder of a Lease may write: the fencekit webhook admits a create, update, patch (status and
// other subresources included) or delete of such an object only if the request presents the Lease's
// current epoch as its field manager ("fencing.fencekit.io/epoch=N") and comes from the acquiring user.
// A FencedResource is the simple case; a FencingPolicy fences ordinary objects (ConfigMaps, Deployments,
// custom resources) that an operator reconciles.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=fp,categories=fencekit
// +kubebuilder:printcolumn:name="Lease",type=string,JSONPath=`.spec.leaseName`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.leaseEpoch`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FencingPolicy struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the Lease and the fenced resources.
	// +required
	Spec FencingPolicySpec `json:"spec"`

	// status is what the fencekit operator observed.
	// +optional
	Status FencingPolicyStatus `json:"status,omitempty"`
}

// FencingPolicyList is a list of FencingPolicies.
//
// +kubebuilder:object:root=true
type FencingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the FencingPolicies.
	Items []FencingPolicy `json:"items"`
}
