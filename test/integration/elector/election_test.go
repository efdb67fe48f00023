package elector_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

func whoAmI(t *testing.T) string {
	t.Helper()
	ssr, err := clientset(t).AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ssr.Status.UserInfo.Username
}

func TestTwoElectorsReleaseHandsOver(t *testing.T) {
	ns, h := parallelLock(t)
	var cands []*candidate
	for _, id := range ids("two", 2) {
		cfg := h.config(t, ns, id)
		cands = append(cands, start(t, cfg))
	}
	first := h.wait(t, 30*time.Second)
	l := getLease(t, ns, "lock")
	if got := holderOf(l); got != first.Holder {
		t.Fatalf("holder = %q, want %q", got, first.Holder)
	}
	if got, want := l.Annotations[protocol.EpochAnnotation], strconv.FormatInt(first.Epoch, 10); got != want {
		t.Errorf("epoch annotation = %q, want %q", got, want)
	}
	if got, want := l.Annotations[protocol.AcquirerAnnotation], whoAmI(t); got != want {
		t.Errorf("acquirer annotation = %q, want %q", got, want)
	}
	if got := l.Labels[protocol.FencedLabel]; got != "true" {
		t.Errorf("fenced label = %q, want \"true\"", got)
	}
	// The default recorder posts an Event (events.k8s.io/v1, fencekit's one Events API) on the Lease.
	wantMsg := "acquired at epoch " + strconv.FormatInt(first.Epoch, 10) + " by " + first.Holder
	eventually(t, 10*time.Second, "the Acquired Event", func() bool {
		evs, err := clientset(t).EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "Acquired" && ev.Action == "Acquire" && ev.Note == wantMsg && ev.ReportingController == elector.EventSource &&
				ev.Regarding.Kind == "Lease" && ev.Regarding.Name == "lock" {
				return true
			}
		}
		return false
	})
	var leader, standby *candidate
	for _, c := range cands {
		if c.e.Identity() == first.Holder {
			leader = c
		} else {
			standby = c
		}
	}
	if !leader.e.IsLeader() || leader.e.Token() != first || leader.e.Deadline().IsZero() {
		t.Errorf("leader: IsLeader=%v Token=%v Deadline=%v", leader.e.IsLeader(), leader.e.Token(), leader.e.Deadline())
	}
	if standby.e.IsLeader() || !standby.e.Token().IsZero() || !standby.e.Deadline().IsZero() {
		t.Errorf("standby reports leadership: %v", standby.e.Token())
	}
	// Renewals do not change the epoch.
	rv := l.ResourceVersion
	eventually(t, 10*time.Second, "a renewal", func() bool { return getLease(t, ns, "lock").ResourceVersion != rv })
	if got := getLease(t, ns, "lock").Annotations[protocol.EpochAnnotation]; got != strconv.FormatInt(first.Epoch, 10) {
		t.Errorf("a renewal changed the epoch to %s", got)
	}

	leader.stop()
	released := getLease(t, ns, "lock")
	if holderOf(released) != "" && holderOf(released) != standby.e.Identity() {
		t.Errorf("after release the holder is %q", holderOf(released))
	}
	second := h.wait(t, 10*time.Second)
	if second.Holder != standby.e.Identity() || second.Epoch != first.Epoch+1 {
		t.Errorf("after release: %v, want %s at epoch %d", second, standby.e.Identity(), first.Epoch+1)
	}
	if got := *getLease(t, ns, "lock").Spec.LeaseTransitions; got != 1 {
		t.Errorf("leaseTransitions = %d, want 1", got)
	}
	h.check(t)
}

func TestFiveElectorsCrashFailover(t *testing.T) {
	ns, h := parallelLock(t)
	cands := map[string]*candidate{}
	for _, id := range ids("five", 5) {
		cfg := h.config(t, ns, id)
		cfg.ReleaseOnCancel = boolPtr(false) // a crash: the holder stops renewing and never releases
		cands[id] = start(t, cfg)
	}
	prev := h.wait(t, 30*time.Second)
	for round := range 3 {
		cands[prev.Holder].stop()
		if holder := holderOf(getLease(t, ns, "lock")); holder != prev.Holder {
			t.Fatalf("after a crash without release the holder is %q, want %q", holder, prev.Holder)
		}
		next := h.wait(t, 15*time.Second)
		if next.Holder == prev.Holder || next.Epoch != prev.Epoch+1 {
			t.Fatalf("round %d: %v after %v", round, next, prev)
		}
		prev = next
	}
	h.check(t)
}

func TestRestartWithSameIdentityRaisesEpoch(t *testing.T) {
	ns, h := parallelLock(t)
	for i, release := range []bool{false, true} {
		cfg := h.config(t, ns, "same")
		cfg.ReleaseOnCancel = boolPtr(release)
		c := start(t, cfg)
		tok := h.wait(t, 15*time.Second)
		c.stop()
		if i == 0 {
			continue
		}
		h.mu.Lock()
		order := h.order
		h.mu.Unlock()
		if len(order) != 2 || order[1] != order[0]+1 || tok.Epoch != order[1] {
			t.Errorf("epochs after a restart with the same identity: %v", order)
		}
	}
	// A third incarnation after a release starts at once with the next epoch.
	start(t, h.config(t, ns, "same"))
	tok := h.wait(t, 10*time.Second)
	if tok.Epoch != h.order[1]+1 {
		t.Errorf("third incarnation: epoch %d, want %d", tok.Epoch, h.order[1]+1)
	}
	h.check(t)
}

func TestLeaseDeletedAndRecreatedEpochDoesNotFallBack(t *testing.T) {
	ns, h := parallelLock(t)
	c := start(t, h.config(t, ns, "a"))
	first := h.wait(t, 15*time.Second)
	// Deleted under a running leader: it steps down and recreates the Lease with a higher epoch.
	deleteLease(t, ns)
	second := h.wait(t, 15*time.Second)
	if second.Epoch <= first.Epoch {
		t.Errorf("after delete under a leader: epoch %d, want > %d", second.Epoch, first.Epoch)
	}
	c.stop()
	// Deleted while nobody runs, then a new candidate.
	deleteLease(t, ns)
	start(t, h.config(t, ns, "b"))
	third := h.wait(t, 15*time.Second)
	if third.Epoch <= second.Epoch {
		t.Errorf("after delete and recreate: epoch %d, want > %d", third.Epoch, second.Epoch)
	}
	h.check(t)
}

// Many candidates race for every acquisition: each leader releases after a short while and a new
// candidate replaces it. Every epoch has exactly one holder and leaderships never overlap.
func TestConcurrentAcquisitionRaces(t *testing.T) {
	ns, h := parallelLock(t)
	running := map[string]*candidate{}
	next := 0
	spawn := func() {
		id := "race-" + strconv.Itoa(next)
		next++
		cfg := h.config(t, ns, id)
		running[id] = start(t, cfg)
	}
	for range 5 {
		spawn()
	}
	for range 8 {
		tok := h.wait(t, 15*time.Second)
		running[tok.Holder].stop() // release: the other four race for it
		delete(running, tok.Holder)
		spawn()
	}
	h.check(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.byEpoch) != 8 && len(h.byEpoch) != 9 {
		t.Errorf("%d distinct epochs, want 8 or 9: %v", len(h.byEpoch), h.order)
	}
}

// The same races under a storm of label writes to the Lease (anyone's with RBAC on Leases): every
// compare-and-swap acquisition loses to one of them, and the acquisition written again as a JSON patch that
// tests the observed spec and epoch must still give every epoch exactly one holder, without overlap.
func TestConcurrentAcquisitionRacesUnderALabelStorm(t *testing.T) {
	ns, h := parallelLock(t)
	leases := clientset(t).CoordinationV1().Leases(ns)
	running := map[string]*candidate{}
	next := 0
	spawn := func() {
		id := "storm-" + strconv.Itoa(next)
		next++
		running[id] = start(t, h.config(t, ns, id))
	}
	for range 3 {
		spawn()
	}
	first := h.wait(t, 15*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var labelled atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				patch := fmt.Sprintf(`{"metadata":{"labels":{"storm":"%d-%d"}}}`, g, i)
				if _, err := leases.Patch(ctx, "lock", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
					labelled.Add(1)
				}
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	// A padded managedFields entry (appended by a JSON patch, which the storm cannot make conflict): the
	// acquisitions below, compare-and-swap or the JSON patch that follows a lost one, reset managedFields.
	pad, err := json.Marshal([]map[string]any{{"op": "add", "path": "/metadata/managedFields/-", "value": padEntry(t, 2000)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Patch(t.Context(), "lock", types.JSONPatchType, pad, metav1.PatchOptions{}); err != nil {
		t.Fatalf("padding the Lease: %v", err)
	}
	tok := first
	for range 5 {
		running[tok.Holder].stop() // release: the others race for it, under the storm
		delete(running, tok.Holder)
		spawn()
		tok = h.wait(t, 15*time.Second)
	}
	cancel()
	wg.Wait()
	t.Logf("%d label writes to the Lease during 5 handovers", labelled.Load())
	for _, e := range getLease(t, ns, "lock").ManagedFields {
		if e.Manager == "pad" {
			t.Errorf("the padded managedFields entry outlived 5 acquisitions")
		}
	}
	h.check(t)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.byEpoch) != 6 && len(h.byEpoch) != 7 {
		t.Errorf("%d distinct epochs, want 6 or 7: %v", len(h.byEpoch), h.order)
	}
}

func TestHandEditedHolderStepsDown(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	leases := clientset(t).CoordinationV1().Leases(ns)
	stopped := make(chan error, 1)
	cfg := shortConfig(t, ns, "lock", "a")
	started := make(chan elector.Token, 1)
	cfg.OnStartedLeading = func(ctx context.Context, tok elector.Token) {
		started <- tok
		<-ctx.Done()
		stopped <- context.Cause(ctx)
	}
	cfg.LeaseDuration = 10 * time.Second // the edit must be noticed by the watch, not by expiry
	cfg.RenewDeadline = 5 * time.Second
	cfg.RetryPeriod = 2 * time.Second
	cfg.SafetyMargin = 200 * time.Millisecond
	start(t, cfg)
	<-started
	l := getLease(t, ns, "lock")
	intruder := "intruder"
	l.Spec.HolderIdentity = &intruder
	if _, err := leases.Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-stopped:
		if want := "elector: leadership lost: holder_changed: the Lease now names holder \"intruder\""; cause == nil || cause.Error() != want {
			t.Errorf("cause = %v, want %s", cause, want)
		}
		if !errors.Is(cause, elector.ErrLeadershipLost) || !errors.Is(cause, elector.ErrLeaseTaken) {
			t.Errorf("cause %v is not both ErrLeadershipLost and ErrLeaseTaken", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the leader did not step down after its Lease was given to another holder")
	}
}

func TestMalformedLeaseIsTreatedAsExpired(t *testing.T) {
	t.Parallel()
	ns := env.Namespace(t)
	leases := clientset(t).CoordinationV1().Leases(ns)
	// The apiserver refuses a negative leaseDurationSeconds, but not a missing one (the unit tests cover
	// both).
	ghost := "ghost"
	l := getLeaseTemplate(ns)
	l.Spec.HolderIdentity = &ghost
	l.Annotations = map[string]string{protocol.EpochAnnotation: "not-a-number"}
	created, err := leases.Create(t.Context(), l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHistory()
	start(t, h.config(t, ns, "a"))
	tok := h.wait(t, 15*time.Second)
	rv, _ := strconv.ParseInt(created.ResourceVersion, 10, 64)
	if tok.Epoch != rv {
		t.Errorf("epoch = %d, want the Lease's resourceVersion %d", tok.Epoch, rv)
	}
}
