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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the FencedResource API.
	GroupVersion = schema.GroupVersion{Group: "fencing.fencekit.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
