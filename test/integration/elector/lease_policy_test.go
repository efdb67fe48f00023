package elector_test

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// logLines is a logger that keeps every line, for tests that wait for what an elector reports.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, args)
		l.mu.Unlock()
	}, funcr.Options{})
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// Electors running as fencekit-elector users (not admins) under fencekit's Lease policy: every write
// they make (create, renewal, release, acquisition by update) presents its epoch and is admitted, and
// epochs go +1 from one holder to the next.
func TestElectorsUnderLeasePolicy(t *testing.T) {
	ns, h := parallelLock(t)
	cands := map[string]*candidate{}
	for _, id := range []string{"pa", "pb"} {
		cfg := h.policyConfig(t, ns, id)
		cands[id] = start(t, cfg)
	}
	first := h.wait(t, 30*time.Second)
	l := getLease(t, ns, "lock")
	if got, want := l.Annotations[protocol.AcquirerAnnotation], first.Holder+"-user"; got != want {
		t.Errorf("acquirer %q, want %q", got, want)
	}
	rv := l.ResourceVersion
	eventually(t, 10*time.Second, "a renewal admitted by the policy", func() bool { return getLease(t, ns, "lock").ResourceVersion != rv })
	if tok := cands[first.Holder].e.Token(); tok != first {
		t.Fatalf("after its renewals the leader reports %v, want %v", tok, first)
	}
	cands[first.Holder].stop() // releases: the standby acquires by update at the next epoch
	second := h.wait(t, 10*time.Second)
	if second.Holder == first.Holder || second.Epoch != first.Epoch+1 {
		t.Fatalf("after the release: %v, want the other candidate at epoch %d", second, first.Epoch+1)
	}
	cands[second.Holder].stop()
	l = getLease(t, ns, "lock")
	if holderOf(l) != "" || l.Annotations[protocol.EpochAnnotation] != strconv.FormatInt(second.Epoch, 10) {
		t.Errorf("after the second release: holder %q at epoch %s, want released at %d", holderOf(l), l.Annotations[protocol.EpochAnnotation], second.Epoch)
	}
	h.check(t)
}

// An admin deletes a live Lease and recreates it unlabelled at an old epoch. Nobody guards that
// annotation, so the elector does not continue it: it seeds the next epoch from the Lease's
// resourceVersion, above every epoch issued before.
func TestUnlabelledLeaseEpochIsNotTrusted(t *testing.T) {
	ns, h := parallelLock(t)
	leases := clientset(t).CoordinationV1().Leases(ns)
	a := start(t, h.policyConfig(t, ns, "a"))
	first := h.wait(t, 30*time.Second)
	a.stop()
	deleteLease(t, ns)
	stale := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lock",
			Annotations: map[string]string{protocol.EpochAnnotation: "1", protocol.AcquirerAnnotation: "a-user"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1)},
	}
	created, err := leases.Create(t.Context(), stale, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start(t, h.policyConfig(t, ns, "b"))
	second := h.wait(t, 30*time.Second)
	if second.Epoch <= first.Epoch {
		t.Errorf("after the unlabelled recreation at epoch 1: epoch %d, want above %d", second.Epoch, first.Epoch)
	}
	if want := created.ResourceVersion; strconv.FormatInt(second.Epoch, 10) != want {
		t.Errorf("epoch %d, want the recreated Lease's resourceVersion %s", second.Epoch, want)
	}
	if got := getLease(t, ns, "lock").Labels[protocol.FencedLabel]; got != "true" {
		t.Errorf("fenced label %q after the acquisition", got)
	}
	h.check(t)
}

// The epoch space is bounded. A Lease at MaxEpoch (written by an admin: the policy refuses any
// epoch above it, and an acquisition can only add one) cannot be acquired: the elector fails closed and
// says why, with the numbers. It runs as an admin here, so that no policy stands in for it.
func TestExhaustedEpochFailsClosed(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	leases := clientset(t).CoordinationV1().Leases(ns)
	top := strconv.FormatInt(protocol.MaxEpoch, 10)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lock", Labels: map[string]string{protocol.FencedLabel: "true"},
			Annotations: map[string]string{protocol.EpochAnnotation: top, protocol.AcquirerAnnotation: "someone"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1)},
	}
	if _, err := leases.Create(t.Context(), l, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs logLines
	cfg := shortConfig(t, ns, "lock", "a")
	cfg.OnStartedLeading = func(_ context.Context, tok elector.Token) { t.Errorf("acquired %v", tok) }
	c := start(t, cfg, elector.WithLogger(logs.logger()))
	want := "lease " + ns + "/lock is at epoch 9007199254740991; the next epoch 9007199254740992 would exceed the highest epoch 9007199254740991"
	eventually(t, 15*time.Second, "the elector to refuse the epoch", func() bool { return logs.has(want) })
	got := getLease(t, ns, "lock")
	if holderOf(got) != "" || got.Annotations[protocol.EpochAnnotation] != top || c.e.IsLeader() {
		t.Errorf("after the refusal: holder %q at epoch %s, leader %v; want the Lease untouched", holderOf(got), got.Annotations[protocol.EpochAnnotation], c.e.IsLeader())
	}
}

// An elector that has seen epoch 2^63-1 (written by hand) must not compute the next epoch as the
// highest seen + 1 (which would wrap to -9223372036854775808): it refuses to issue an epoch at or below
// one it has seen, and never computes past the bound.
func TestSeenMaxInt64DoesNotOverflow(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	leases := clientset(t).CoordinationV1().Leases(ns)
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lock", Labels: map[string]string{protocol.FencedLabel: "true"},
			Annotations: map[string]string{protocol.EpochAnnotation: strconv.FormatInt(math.MaxInt64, 10), protocol.AcquirerAnnotation: "someone"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone"), LeaseDurationSeconds: ptr.To[int32](3600)},
	}
	l, err := leases.Create(t.Context(), l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs logLines
	seen := make(chan int64, 10)
	cfg := shortConfig(t, ns, "lock", "a")
	cfg.OnNewLeader = func(_ string, epoch int64) { seen <- epoch }
	cfg.OnStartedLeading = func(_ context.Context, tok elector.Token) { t.Errorf("acquired %v", tok) }
	c := start(t, cfg, elector.WithLogger(logs.logger()))
	select {
	case e := <-seen:
		if e != math.MaxInt64 {
			t.Fatalf("observed epoch %d", e)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the elector never observed the Lease")
	}
	// The annotation is wiped and the Lease released: a Lease without a valid epoch, seeded from its
	// resourceVersion, which is below the epoch the elector saw.
	l.Annotations[protocol.EpochAnnotation] = "garbage"
	l.Spec.HolderIdentity = ptr.To("")
	if _, err := leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "is not above 9223372036854775807, the highest epoch this elector has seen under this name"
	eventually(t, 15*time.Second, "the elector to refuse the epoch", func() bool { return logs.has(want) })
	got := getLease(t, ns, "lock")
	if holderOf(got) != "" || got.Annotations[protocol.EpochAnnotation] != "garbage" || c.e.IsLeader() {
		t.Errorf("after the refusal: holder %q at epoch %s, leader %v; want the Lease untouched", holderOf(got), got.Annotations[protocol.EpochAnnotation], c.e.IsLeader())
	}
}
