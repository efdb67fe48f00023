package admission

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// In a namespace being deleted, the namespace controller deletes every object: the holder's write that
// changes content there would be acknowledged and then lost, so it is refused; removing a finalizer and
// raising the epoch still go through, as on an object being deleted. The rule asks for the namespace only
// for the writes that present a token and the namespace controller's deletes.
func TestTokenWritesInATerminatingNamespace(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	lease := &Lease{Name: "l", Epoch: 3, Holder: "h", Acquirer: "u", Fenced: true, Duration: 15 * time.Second, RenewTime: now, Source: Quorum}
	fr := func(epoch int64, data any, finalizers ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fencing.fencekit.io/v1alpha1", "kind": "FencedResource",
			"metadata": map[string]any{"name": "orders", "namespace": "ns", "finalizers": finalizers,
				"annotations": map[string]any{"fencing.fencekit.io/writer": "h"}},
			"spec": map[string]any{"leaseName": "l", "epoch": epoch, "data": data}}}
	}
	for name, tc := range map[string]struct {
		old, updated *unstructured.Unstructured
		terminating  bool
		want         protocol.Reason
	}{
		"the holder writes data":                            {old: fr(3, map[string]any{"v": int64(1)}), updated: fr(3, map[string]any{"v": int64(2)}), want: ""},
		"the holder writes data in a terminating namespace": {old: fr(3, map[string]any{"v": int64(1)}), updated: fr(3, map[string]any{"v": int64(2)}), terminating: true, want: protocol.ReasonInvalid},
		"the holder removes its finalizer there":            {old: fr(3, map[string]any{"v": int64(1)}, "example.com/cleanup"), updated: fr(3, map[string]any{"v": int64(1)}), terminating: true, want: ""},
		"a raise of the epoch there (fence-on-acquire)":     {old: fr(2, map[string]any{"v": int64(1)}), updated: fr(3, map[string]any{"v": int64(1)}), terminating: true, want: ""},
		"the holder adds a finalizer in a live namespace":   {old: fr(3, map[string]any{"v": int64(1)}), updated: fr(3, map[string]any{"v": int64(1)}, "example.com/cleanup"), want: ""},
		"the holder adds a finalizer in a terminating one":  {old: fr(3, map[string]any{"v": int64(1)}), updated: fr(3, map[string]any{"v": int64(1)}, "example.com/cleanup"), terminating: true, want: ""},
		"the holder writes its first data there":            {old: fr(3, nil), updated: fr(3, map[string]any{"v": int64(2)}), terminating: true, want: protocol.ReasonInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Request{Class: FencedResource, Operation: Update, User: User{Name: "u"}, Kind: "FencedResource", Namespace: "ns", Name: "orders",
				Old: tc.old, New: tc.updated, LeaseName: "l", FieldManager: protocol.FieldManagerFor(3), NamespaceTerminating: tc.terminating}
			if !ReadsNamespace(r) {
				t.Fatalf("ReadsNamespace = false for a write that presents a token")
			}
			r.Complete()
			v := Decide(r, lease, now)
			var got protocol.Reason
			if v.Err != nil {
				got = v.Err.Reason
			}
			if v.Need != Decided || got != tc.want {
				t.Errorf("verdict %+v, want reason %q", v, tc.want)
			}
		})
	}
	if ReadsNamespace(&Request{Class: FencedResource, Operation: Update, User: User{Name: "editor"}}) {
		t.Errorf("ReadsNamespace = true for a write without a token: it is decided without the namespace")
	}
}
