package admission

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// A second DELETE of an object being deleted, by a user without the token, is admitted only if it changes
// nothing: its options, the finalizers the object holds and the resource's own default decide what the
// apiserver does with the dependents (ReplicationControllers and batch/v1 Jobs orphan them by default).
func TestSecondDeleteChanges(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	lease := &Lease{Name: "l", Epoch: 3, Holder: "h", Acquirer: "u", Fenced: true, Duration: 15 * time.Second, RenewTime: now, Source: Quorum}
	deleting := func(kind string, finalizers ...any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"kind": kind, "metadata": map[string]any{"name": "x", "namespace": "ns",
			"deletionTimestamp": "2026-12-03T11:59:59Z", "finalizers": finalizers}}}
	}
	background, orphan := ptr.To("Background"), ptr.To("Orphan")
	for name, tc := range map[string]struct {
		kind, group, version string
		finalizers           []any
		opts                 DeleteOptions
		want                 protocol.Reason
	}{
		"no options, a ReplicationController the holder deleted in the background": {kind: "ReplicationController", version: "v1",
			finalizers: []any{"example.com/cleanup"}, want: protocol.ReasonNotHolder},
		"no options, a batch/v1 Job the holder deleted in the background": {kind: "Job", group: "batch", version: "v1",
			finalizers: []any{"example.com/cleanup"}, want: protocol.ReasonNotHolder},
		"no options, a Deployment the holder deleted in the background": {kind: "Deployment", group: "apps", version: "v1",
			finalizers: []any{"example.com/cleanup"}},
		"no options, a ReplicationController the holder deleted orphaning": {kind: "ReplicationController", version: "v1",
			finalizers: []any{"example.com/cleanup", "orphan"}},
		"no options, a ReplicationController deleted in the foreground": {kind: "ReplicationController", version: "v1",
			finalizers: []any{"foregroundDeletion"}},
		"Background, a ReplicationController the holder deleted in the background": {kind: "ReplicationController", version: "v1",
			finalizers: []any{"example.com/cleanup"}, opts: DeleteOptions{PropagationPolicy: background}},
		"Orphan, a Deployment the holder deleted in the background": {kind: "Deployment", group: "apps", version: "v1",
			finalizers: []any{"example.com/cleanup"}, opts: DeleteOptions{PropagationPolicy: orphan}, want: protocol.ReasonNotHolder},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts.DefaultOrphans = DefaultOrphans(tc.group, tc.version, tc.kind)
			r := &Request{Class: Object, Operation: Delete, User: User{Name: "editor"}, Kind: tc.kind, Namespace: "ns", Name: "x",
				Old: deleting(tc.kind, tc.finalizers...), LeaseName: "l", DeleteOptions: tc.opts}
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
}
