// Package scheme builds the runtime.Scheme fencekit's binaries and tests share: client-go's built-in types
// and the fencing.fencekit.io API.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// New returns a scheme with client-go's types and fencekit's API registered.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(fencingv1alpha1.AddToScheme(s))
	return s
}
