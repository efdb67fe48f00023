package fencing_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// A write below the stored epoch, refused by the CRD's own rule inside the apiserver (no webhook runs in
// this package's control plane), is read as a stale epoch by ReasonOf and IsStale.
func TestCRDRefusalIsStale(t *testing.T) {
	ns := env.Namespace(t)
	fr := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "orders-writer", Epoch: 5},
	}
	if err := env.Client.Create(t.Context(), fr); err != nil {
		t.Fatal(err)
	}
	fr.Spec.Epoch = 4
	err := env.Client.Update(t.Context(), fr)
	if got := fencing.ReasonOf(err); got != protocol.ReasonStale || !fencing.IsStale(err) {
		t.Fatalf("update from epoch 5 to 4: ReasonOf(%v) = %q, want %q", err, got, protocol.ReasonStale)
	}
	if !strings.Contains(err.Error(), fencingv1alpha1.StaleEpochMessage+" 4: this FencedResource has already admitted epoch 5") {
		t.Errorf("the CRD's refusal %q does not name both epochs", err)
	}
}
