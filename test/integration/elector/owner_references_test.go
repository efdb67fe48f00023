package elector_test

import (
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// The Lease policy's owner rule: a Lease becomes fenced only without
// ownerReferences. Another workload with the fencekit-elector role (which may create Leases) creates the
// elector's Lease before it first runs, unlabelled, owned by an object whose deletion it controls; without
// the rule, the elector's first acquisition would label the Lease with that owner, and deleting the
// owner would have the garbage collector delete the fenced Lease. The elector is refused instead, says
// why in its log (the Lease, the owners, how to remove them), takes nothing, and acquires once they are
// gone. A fenced Lease that already has owners (set by break glass) is renewed and released:
// the elector writes them back as it read them.
func TestOwnedUnlabelledLeaseIsNotFenced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.Namespace(t)
	admin := clientset(t)
	owner, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}
	squat := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lock", OwnerReferences: []metav1.OwnerReference{ref}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("")}}
	if _, err := electorClientset(t, ns, "mallory-user").CoordinationV1().Leases(ns).Create(ctx, squat, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var logs logLines
	h := newHistory()
	cfg := h.policyConfig(t, ns, "a")
	a := start(t, cfg, elector.WithLogger(logs.logger()))
	eventually(t, 20*time.Second, "the policy refuses the acquisition of the owned Lease", func() bool {
		return logs.has("fenced lease lock: a Lease becomes fenced (created or labelled fencing.fencekit.io/fenced=true) only without ownerReferences; it has 1") &&
			logs.has("remove metadata.ownerReferences first, for example with kubectl edit lease lock -n "+ns)
	})
	if l := getLease(t, ns, "lock"); l.Labels[protocol.FencedLabel] != "" || holderOf(l) != "" {
		t.Fatalf("the owned Lease was taken: label %q, holder %q", l.Labels[protocol.FencedLabel], holderOf(l))
	}
	if a.e.IsLeader() {
		t.Fatal("the elector leads on a Lease it could not acquire")
	}

	// An admin removes the owner; the elector takes the Lease at its next retry.
	if _, err := admin.CoordinationV1().Leases(ns).Patch(ctx, "lock", types.JSONPatchType,
		[]byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	first := h.wait(t, 30*time.Second)

	// Break glass puts an owner on the fenced Lease: the holder keeps renewing, and releases, with it.
	l := getLease(t, ns, "lock")
	l.OwnerReferences = []metav1.OwnerReference{ref}
	if _, err := admin.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := getLease(t, ns, "lock").Spec.RenewTime.Time
	eventually(t, 10*time.Second, "the holder renews the owned fenced Lease", func() bool {
		l := getLease(t, ns, "lock")
		return l.Spec.RenewTime.After(renewed) && len(l.OwnerReferences) == 1
	})
	if !a.e.IsLeader() {
		t.Fatal("the holder lost the owned fenced Lease")
	}
	a.stop()
	if l := getLease(t, ns, "lock"); holderOf(l) != "" || len(l.OwnerReferences) != 1 || l.Annotations[protocol.EpochAnnotation] != strconv.FormatInt(first.Epoch, 10) {
		t.Fatalf("after the stop: holder %q, owners %v, epoch %s; want released at %d with the owner kept", holderOf(l), l.OwnerReferences, l.Annotations[protocol.EpochAnnotation], first.Epoch)
	}
}
