// Package v1alpha1 is the fencing.fencekit.io/v1alpha1 API: FencedResource, a resource whose writes are
// admitted only when they carry the current fencing epoch of the Lease they are bound to.
//
// This package is the contract between users, the fencekit operator and the libraries in pkg/. It imports
// nothing else of fencekit.
//
// +kubebuilder:object:generate=true
// +groupName=fencing.fencekit.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the FencedResource API.
	GroupVersion = schema.GroupVersion{Group: "fencing.fencekit.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme (apimachinery's builder, as
	// k8s.io/api does: the contract depends on apimachinery only, not on controller-runtime).
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&FencedResource{}, &FencedResourceList{},
		&FencingPolicy{}, &FencingPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
