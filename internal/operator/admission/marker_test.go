package admission

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// A write without the token to an object whose deletion marker or hold is the Lease's current epoch waits
// (the holder's DELETE or compare-and-swap write is pending); a stale marker, an expired Lease, or a marker
// on an object already being deleted (no DELETE pending) hold nothing; a hold holds there too; the
// cluster's controllers (the garbage collector removing foregroundDeletion) are not held.
func TestArmedMarker(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	live := &Lease{Epoch: 3, Holder: "h", Acquirer: "u", Fenced: true, Duration: 15 * time.Second, RenewTime: now, Source: Quorum}
	expired := &Lease{Epoch: 3, Holder: "h", Acquirer: "u", Fenced: true, Duration: 15 * time.Second, RenewTime: now.Add(-time.Minute), Source: Quorum}
	object := func(marker string, deleting bool, finalizers ...any) *unstructured.Unstructured {
		meta := map[string]any{"name": "cm", "namespace": "ns", "annotations": map[string]any{"fencing.fencekit.io/delete-at-epoch": marker},
			"finalizers": finalizers}
		if deleting {
			meta["deletionTimestamp"] = "2026-12-02T11:59:59Z"
		}
		return &unstructured.Unstructured{Object: map[string]any{"metadata": meta}}
	}
	held := func(u *unstructured.Unstructured, epoch string) *unstructured.Unstructured {
		c := u.DeepCopy()
		a := c.GetAnnotations()
		a["fencing.fencekit.io/hold-at-epoch"] = epoch
		c.SetAnnotations(a)
		return c
	}
	labelled := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		c := u.DeepCopy()
		c.SetLabels(map[string]string{"x": "y"})
		return c
	}
	for name, tc := range map[string]struct {
		old, updated *unstructured.Unstructured
		class        Class
		user         string
		lease        *Lease
		racing       int64 // Request.Racing
		want         protocol.Reason
	}{
		"a label on a FencedResource whose marker is armed": {old: object("3", false), updated: labelled(object("3", false)), class: FencedResource, user: "editor", lease: live, want: protocol.ReasonTokenMissing},
		"a label after the Lease expired":                   {old: object("3", false), updated: labelled(object("3", false)), class: FencedResource, user: "editor", lease: expired},
		"a label under a stale marker":                      {old: object("2", false), updated: labelled(object("2", false)), class: FencedResource, user: "editor", lease: live},
		// A marker an earlier holder left (on an object a raise left behind) does not hide the current
		// holder's hold.
		"a label under a stale marker and the holder's hold": {old: held(object("2", false), "3"), updated: labelled(held(object("2", false), "3")), class: FencedResource, user: "editor", lease: live, want: protocol.ReasonTokenMissing},
		// A marker or a hold at a later epoch (written by anyone before a policy covered the object) does not
		// hide the current holder's either.
		"a label under a future marker and the holder's hold":                 {old: held(object("7", false), "3"), updated: labelled(held(object("7", false), "3")), class: FencedResource, user: "editor", lease: live, want: protocol.ReasonTokenMissing},
		"a label under the holder's marker and a future hold":                 {old: held(object("3", false), "7"), updated: labelled(held(object("3", false), "7")), class: FencedResource, user: "editor", lease: live, want: protocol.ReasonTokenMissing},
		"a label under a future marker alone":                                 {old: object("7", false), updated: labelled(object("7", false)), class: FencedResource, user: "editor", lease: live},
		"an editor's finalizer under the holder's hold":                       {old: held(object("", false), "3"), updated: held(object("", false, "example.com/x"), "3"), class: Object, user: "editor", lease: live, want: protocol.ReasonTokenMissing},
		"the Deployment controller's finalizer under the holder's hold":       {old: held(object("", false), "3"), updated: held(object("", false, "example.com/x"), "3"), class: Object, user: DeploymentControllerUser, lease: live},
		"a label on a FencedResource being deleted under the holder's hold":   {old: held(object("", true, "example.com/cleanup"), "3"), updated: labelled(held(object("", true, "example.com/cleanup"), "3")), class: FencedResource, user: "editor", lease: live, want: protocol.ReasonTokenMissing},
		"a label on a FencedResource being deleted under the holder's marker": {old: object("3", true, "example.com/cleanup"), updated: labelled(object("3", true, "example.com/cleanup")), class: FencedResource, user: "editor", lease: live},
		"the garbage collector removes foregroundDeletion from an object being deleted": {
			old: object("3", true, "foregroundDeletion"), updated: object("3", true), class: Object, user: GarbageCollectorUser, lease: live},
		// While a write presenting a token is being decided on the same stored object, writes without the
		// token wait, whoever sends them, and without a read of the Lease.
		"a label while a token's write is decided on the same object":                   {old: object("", false), updated: labelled(object("", false)), class: Object, user: "editor", lease: live, racing: 3, want: protocol.ReasonTokenMissing},
		"a label on a FencedResource while a token's write is decided on it":            {old: object("", false), updated: labelled(object("", false)), class: FencedResource, user: "editor", lease: live, racing: 3, want: protocol.ReasonTokenMissing},
		"the Deployment controller's finalizer while a token's write is decided on it":  {old: object("", false), updated: object("", false, "example.com/x"), class: Object, user: DeploymentControllerUser, lease: live, racing: 3, want: protocol.ReasonTokenMissing},
		"a label while a stale token's write is decided on the same object":             {old: object("", false), updated: labelled(object("", false)), class: Object, user: "editor", lease: live, racing: 2, want: protocol.ReasonTokenMissing},
		"a label under an expired Lease while a token's write is decided on the object": {old: object("", false), updated: labelled(object("", false)), class: Object, user: "editor", lease: expired, racing: 3, want: protocol.ReasonTokenMissing},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Request{Class: tc.class, Operation: Update, User: User{Name: tc.user}, Kind: "ConfigMap", Namespace: "ns", Name: "cm",
				Old: tc.old, New: tc.updated, LeaseName: "l", Racing: tc.racing}
			r.Complete()
			v := Decide(r, nil, now)
			if tc.racing > 0 && v.Need != Decided {
				t.Fatalf("a write racing a token's write needs %v, want it decided without the Lease", v.Need)
			}
			if v.Need == NeedQuorum {
				v = Decide(r, tc.lease, now)
			}
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

// Only a write that may commit holds back the free writes on the object it read: the acquirer's (or break
// glass's) update at the epoch a live Lease shows, not a dry run, a stale epoch, another user presenting the
// current token, or any write under an expired or missing Lease.
func TestHoldsBackFreeWrites(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	live := &Lease{Epoch: 3, Holder: "h", Acquirer: "app", Fenced: true, Duration: 15 * time.Second, RenewTime: now, Source: Copy}
	expired := &Lease{Epoch: 3, Holder: "h", Acquirer: "app", Fenced: true, Duration: 15 * time.Second, RenewTime: now.Add(-time.Minute), Source: Copy}
	for name, tc := range map[string]struct {
		user    User
		manager string
		op      Operation
		dryRun  bool
		lease   *Lease
		want    bool
	}{
		"the acquirer at the current epoch":         {user: User{Name: "app"}, manager: "fencing.fencekit.io/epoch=3", op: Update, lease: live, want: true},
		"break glass at the current epoch":          {user: User{Name: "admin", Groups: []string{BreakGlassGroup}}, manager: "fencing.fencekit.io/epoch=3", op: Update, lease: live, want: true},
		"the acquirer's dry run":                    {user: User{Name: "app"}, manager: "fencing.fencekit.io/epoch=3", op: Update, dryRun: true, lease: live},
		"the acquirer at a stale epoch":             {user: User{Name: "app"}, manager: "fencing.fencekit.io/epoch=2", op: Update, lease: live},
		"another user presenting the current token": {user: User{Name: "editor"}, manager: "fencing.fencekit.io/epoch=3", op: Update, lease: live},
		"the acquirer under an expired Lease":       {user: User{Name: "app"}, manager: "fencing.fencekit.io/epoch=3", op: Update, lease: expired},
		"the acquirer with no Lease":                {user: User{Name: "app"}, manager: "fencing.fencekit.io/epoch=3", op: Update},
		"the acquirer's create":                     {user: User{Name: "app"}, manager: "fencing.fencekit.io/epoch=3", op: Create, lease: live},
		"a malformed token":                         {user: User{Name: "app"}, manager: "fencing.fencekit.io/epoch=x", op: Update, lease: live},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Request{Class: Object, Operation: tc.op, User: tc.user, FieldManager: tc.manager, DryRun: tc.dryRun, LeaseName: "l"}
			r.Complete()
			if got := HoldsBackFreeWrites(r, tc.lease, now); got != tc.want {
				t.Errorf("HoldsBackFreeWrites = %v, want %v", got, tc.want)
			}
		})
	}
}

// A write without the token that read an object a holder's write is being decided on waits a moment, with
// no Event (Verdict.Moment); fencekit's own operator, whose status write follows the holder's data, does not.
func TestRacingHoldsBackAllButTheOperator(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	fr := func(status string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "orders", "namespace": "ns", "resourceVersion": "7"},
			"spec":     map[string]any{"leaseName": "l", "epoch": int64(3)},
			"status":   map[string]any{"observedEpoch": status}}}
	}
	for name, user := range map[string]User{
		"an editor":           {Name: "editor"},
		"a kubelet":           {Name: "system:node:n1", Groups: []string{"system:nodes"}},
		"fencekit's operator": {Name: "system:serviceaccount:fencekit-system:fencekit", Operator: true},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Request{Class: FencedResource, Operation: Update, Subresource: "status", User: user, Kind: "FencedResource",
				Namespace: "ns", Name: "orders", LeaseName: "l", Old: fr("2"), New: fr("3"), Racing: 3}
			r.Complete()
			v := Decide(r, nil, now)
			if user.Operator {
				if v.Moment {
					t.Errorf("the operator's status write waits: %v", v.Err)
				}
				return
			}
			if !v.Moment || v.Err == nil || v.Err.Reason != protocol.ReasonTokenMissing {
				t.Errorf("verdict %+v, want a refusal for a moment", v)
			}
		})
	}
}

// The acquirer may clear a deletion marker or hold from an object without raising its record (what
// fence-on-acquire writes to an object it leaves), but nothing else without the record.
func TestClearingMarksWithoutARaise(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	live := &Lease{Epoch: 2, Holder: "h", Acquirer: "app", Fenced: true, Duration: 15 * time.Second, RenewTime: now, Source: Quorum}
	object := func(annotations map[string]any, data string) *unstructured.Unstructured {
		meta := map[string]any{"name": "cm", "namespace": "ns", "resourceVersion": "5"}
		if annotations != nil {
			meta["annotations"] = annotations
		}
		return &unstructured.Unstructured{Object: map[string]any{"metadata": meta, "data": map[string]any{"k": data}}}
	}
	marked := map[string]any{"fencing.fencekit.io/delete-at-epoch": "2", "team": "a"}
	// A Deployment's strategy raises its generation with any change of its annotations.
	generation := func(u *unstructured.Unstructured, g int64) *unstructured.Unstructured {
		u.SetGeneration(g)
		return u
	}
	for name, tc := range map[string]struct {
		old, updated *unstructured.Unstructured
		admitted     bool
	}{
		"the marker removed":                        {old: object(marked, "x"), updated: object(map[string]any{"team": "a"}, "x"), admitted: true},
		"the marker, the only annotation, removed":  {old: object(map[string]any{"fencing.fencekit.io/hold-at-epoch": "2"}, "x"), updated: object(nil, "x"), admitted: true},
		"the marker removed and data written":       {old: object(marked, "x"), updated: object(map[string]any{"team": "a"}, "y")},
		"the marker and another annotation removed": {old: object(marked, "x"), updated: object(nil, "x")},
		"nothing changed":                           {old: object(marked, "x"), updated: object(marked, "x")},
		// A record anyone wrote before coverage (here above the epoch, or no epoch at all) stays as stored.
		"the marker removed, a seeded record kept": {old: object(map[string]any{"fencing.fencekit.io/delete-at-epoch": "3", "fencing.fencekit.io/epoch": "7"}, "x"),
			updated: object(map[string]any{"fencing.fencekit.io/epoch": "7"}, "x"), admitted: true},
		"the hold removed, an invalid record kept": {old: object(map[string]any{"fencing.fencekit.io/hold-at-epoch": "1", "fencing.fencekit.io/epoch": "0"}, "x"),
			updated: object(map[string]any{"fencing.fencekit.io/epoch": "0"}, "x"), admitted: true},
		"the marker removed, the generation raised by the apiserver": {old: generation(object(marked, "x"), 1), updated: generation(object(map[string]any{"team": "a"}, "x"), 2), admitted: true},
		"the marker removed, the record changed": {old: object(map[string]any{"fencing.fencekit.io/delete-at-epoch": "3", "fencing.fencekit.io/epoch": "7"}, "x"),
			updated: object(map[string]any{"fencing.fencekit.io/epoch": "1"}, "x")},
	} {
		t.Run(name, func(t *testing.T) {
			r := &Request{Class: Object, Operation: Update, User: User{Name: "app"}, FieldManager: "fencing.fencekit.io/epoch=2",
				Kind: "ConfigMap", Namespace: "ns", Name: "cm", LeaseName: "l", Policy: "ns/p", CoveredBefore: true, CoveredAfter: true,
				Old: tc.old, New: tc.updated}
			r.Complete()
			v := Decide(r, live, now)
			if v.Admitted() != tc.admitted {
				t.Errorf("verdict %+v, want admitted %v", v, tc.admitted)
			}
		})
	}
}
