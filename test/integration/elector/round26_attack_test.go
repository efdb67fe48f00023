//go:build openholes

package elector_test

// Round 26 of the independent attacker, against 5adcc83 (a renewal's answer read for its resourceVersion)
// and 8316126 (a Lease whose fenced label is removed is released and acquired at a new epoch). Each test
// asserts the invariant it tries to break. Four worked at 8316126, all one hole: a renewal's answer or
// re-read newer than the deletion the watch reported showed the Lease without its fenced label, nothing
// looked at the label, and the holder went on renewing the unlabelled Lease at its old epoch
// (TestRound26LabelRemovedDuringARenewal, ...AtTheFirstRenewal, ...AtARandomTime,
// ...WhileTheWatchIsDown). Closed by decision 0072's amendment: a held version without the label ends the
// term whatever brought it (runner.unfenced), kept in make test as TestFencedLabelRemovedDuringARenewal.
// The rest held. These run under -tags openholes: they bound the real clock.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var (
	r26Label    = "/metadata/labels/" + strings.ReplaceAll(protocol.FencedLabel, "/", "~1")
	r26Epoch    = "/metadata/annotations/" + strings.ReplaceAll(protocol.EpochAnnotation, "/", "~1")
	r26RemoveOp = `{"op":"remove","path":"` + r26Label + `"}`
)

// r26Patch applies a JSON patch of the given operations to the Lease "lock" of ns as break glass.
func r26Patch(t *testing.T, ns string, ops ...string) error {
	t.Helper()
	_, err := clientset(t).CoordinationV1().Leases(ns).Patch(context.Background(), "lock", types.JSONPatchType,
		[]byte("["+strings.Join(ops, ",")+"]"), metav1.PatchOptions{})
	return err
}

// r26State describes the Lease "lock" of ns for a failure message.
func r26State(t *testing.T, ns string) string {
	l, err := clientset(t).CoordinationV1().Leases(ns).Get(context.Background(), "lock", metav1.GetOptions{})
	if err != nil {
		return "lease: " + err.Error()
	}
	return fmt.Sprintf("lease rv=%s uid=%s holder=%q label=%q epoch=%q acquirer=%q", l.ResourceVersion, l.UID, holderOf(l),
		l.Labels[protocol.FencedLabel], l.Annotations[protocol.EpochAnnotation], l.Annotations[protocol.AcquirerAnnotation])
}

// r26Relabelled polls until the Lease is labelled fenced=true with an epoch above epoch, for at most within.
func r26Relabelled(t *testing.T, ns string, epoch int64, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		l, err := clientset(t).CoordinationV1().Leases(ns).Get(context.Background(), "lock", metav1.GetOptions{})
		if err == nil && l.Labels[protocol.FencedLabel] == "true" && l.Annotations[protocol.EpochAnnotation] > "" {
			var e int64
			if _, serr := fmt.Sscan(l.Annotations[protocol.EpochAnnotation], &e); serr == nil && e > epoch {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// r26Gauge samples fencekit_elector_is_leader for ns/lock every millisecond until stop, and records any
// value other than 0 or 1.
func r26Gauge(t *testing.T, reg *prometheus.Registry, ns string) (stop func() (bad float64, ok bool)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var badv atomic.Value
	wg.Go(func() {
		for ctx.Err() == nil {
			if v := leaseGauge(reg, "fencekit_elector_is_leader", ns+"/lock"); v != -999 && (v < 0 || v > 1) {
				badv.CompareAndSwap(nil, v)
			}
			time.Sleep(time.Millisecond)
		}
	})
	return func() (float64, bool) {
		cancel()
		wg.Wait()
		if v := badv.Load(); v != nil {
			return v.(float64), false
		}
		return 0, true
	}
}

// TestRound26LabelRemovedDuringARenewal: break glass removes the fenced label while the holder's renewal
// is on its way (the PUT is held in the client's transport until the removal is done and the watch has
// had time to report the Lease gone). The renewal's compare-and-swap conflicts and the holder renews on
// its term (a JSON patch testing holder and epoch), which the unlabelled Lease passes; in the subtest
// "reread", that patch fails once (a transport error) and the holder re-reads the Lease instead.
// Invariant (decision 0072): removing the label does not take the Lease out of fencing while an elector
// runs for it: the term ends (fenced_label_removed) and the Lease is labelled again at a higher epoch
// within a few seconds.
func TestRound26LabelRemovedDuringARenewal(t *testing.T) {
	for _, failPatch := range []bool{false, true} {
		name := "renewOnTerm"
		if failPatch {
			name = "reread"
		}
		t.Run(name, func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			var armed, patchArmed atomic.Bool
			hit, release := make(chan struct{}), make(chan struct{})
			var mu sync.Mutex
			var seen []string // the requests on the Lease from the held renewal on
			wrap := func(rt http.RoundTripper) http.RoundTripper {
				return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					held := false
					onLease := strings.HasSuffix(r.URL.Path, "/leases/lock")
					if r.Method == http.MethodPut && onLease && armed.CompareAndSwap(true, false) {
						close(hit)
						<-release
						held = true
					}
					var resp *http.Response
					var err error
					if r.Method == http.MethodPatch && onLease && patchArmed.CompareAndSwap(true, false) {
						err = errors.New("round26: the PATCH of the Lease failed")
					} else {
						resp, err = rt.RoundTrip(r)
					}
					mu.Lock()
					if (held || len(seen) > 0) && len(seen) < 8 && onLease {
						st := "error"
						if err == nil {
							st = resp.Status
						}
						seen = append(seen, r.Method+" "+st)
					}
					mu.Unlock()
					return resp, err
				})
			}
			var stopped atomic.Int64
			cfg := h.config(t, ns, "a")
			cfg.Client = electorClientset(t, ns, "a-user", wrap)
			cfg.OnStoppedLeading = func() { stopped.Add(1) }
			c := start(t, cfg, elector.WithMetricsRegisterer(reg))
			tok := h.wait(t, 20*time.Second)
			patchArmed.Store(failPatch)
			armed.Store(true)
			select {
			case <-hit:
			case <-time.After(5 * time.Second):
				t.Fatal("no renewal within 5s")
			}
			if err := r26Patch(t, ns, r26RemoveOp); err != nil {
				close(release)
				t.Fatalf("break glass removing the label: %v", err)
			}
			time.Sleep(300 * time.Millisecond) // the watch reports the Lease gone meanwhile
			close(release)
			if !r26Relabelled(t, ns, tok.Epoch, 5*time.Second) {
				t.Errorf("5s after break glass removed the fenced label during a renewal of epoch %d: still not labelled at a higher epoch; %s; IsLeader=%t, leaderships stopped %d, lost %v",
					tok.Epoch, r26State(t, ns), c.e.IsLeader(), stopped.Load(), counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
			}
			mu.Lock()
			t.Logf("requests on the Lease from the held renewal on: %v", seen)
			mu.Unlock()
			h.check(t)
		})
	}
}

// TestRound26LabelRemovedAtTheFirstRenewal: no transport delay; break glass removes the fenced label one
// retryPeriod after the acquisition, when the first renewal is due (the holder's renewals are the only
// other writes of the Lease). Same invariant as TestRound26LabelRemovedDuringARenewal: within 5s the
// Lease is labelled again at a higher epoch. Five tries, each in a namespace of its own.
func TestRound26LabelRemovedAtTheFirstRenewal(t *testing.T) {
	for i := range 5 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			cfg := h.policyConfig(t, ns, "a")
			c := start(t, cfg, elector.WithMetricsRegisterer(reg))
			tok := h.wait(t, 20*time.Second)
			time.Sleep(cfg.RetryPeriod)
			if err := r26Patch(t, ns, r26RemoveOp); err != nil {
				t.Fatal(err)
			}
			if !r26Relabelled(t, ns, tok.Epoch, 5*time.Second) {
				t.Errorf("5s after break glass removed the fenced label of epoch %d: still not labelled at a higher epoch; %s; IsLeader=%t, lost %v",
					tok.Epoch, r26State(t, ns), c.e.IsLeader(), counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
			}
			h.check(t)
		})
	}
}

// TestRound26LabelRemovedRepeatedlyWithAStandby: two electors of one process (users held to the Lease
// policy) on one registry; break glass removes the label five times, each time once a leader leads.
// Invariants: is_leader is 0 or 1, leaderships never overlap, epochs strictly increase, each removal is
// followed by a new leadership at a higher epoch with the label written back, well before an expiry.
func TestRound26LabelRemovedRepeatedlyWithAStandby(t *testing.T) {
	ns, h := parallelLock(t)
	reg := prometheus.NewRegistry()
	cfgA, cfgB := h.policyConfig(t, ns, "a"), h.policyConfig(t, ns, "b")
	cfgA.LeaseDuration, cfgB.LeaseDuration = 30*time.Second, 30*time.Second
	a := start(t, cfgA, elector.WithMetricsRegisterer(reg))
	b := start(t, cfgB, elector.WithMetricsRegisterer(reg))
	stop := r26Gauge(t, reg, ns)
	tok := h.wait(t, 20*time.Second)
	for i := range 5 {
		time.Sleep(400 * time.Millisecond)
		if err := r26Patch(t, ns, r26RemoveOp); err != nil {
			t.Fatalf("removal %d: %v", i, err)
		}
		select {
		case next := <-h.started:
			if next.Epoch <= tok.Epoch {
				t.Errorf("removal %d: epoch %d after %d", i, next.Epoch, tok.Epoch)
			}
			tok = next
		case <-time.After(10 * time.Second):
			t.Fatalf("removal %d: no new leadership within 10s (leaseDuration 30s); %s; lost %v", i, r26State(t, ns),
				counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
		}
		if !r26Relabelled(t, ns, tok.Epoch-1, 5*time.Second) {
			t.Errorf("removal %d: the Lease is not labelled at epoch %d: %s", i, tok.Epoch, r26State(t, ns))
		}
	}
	a.stop()
	b.stop()
	if v, ok := stop(); !ok {
		t.Errorf("is_leader sampled at %v", v)
	}
	h.check(t)
}

// TestRound26LabelRemovedThenDeleted: break glass removes the label and deletes the Lease at once; two
// electors of one process compete for the re-created Lease. Invariants: no overlap, is_leader 0 or 1,
// a new leadership at a higher epoch, labelled.
func TestRound26LabelRemovedThenDeleted(t *testing.T) {
	ns, h := parallelLock(t)
	reg := prometheus.NewRegistry()
	cfgA, cfgB := h.policyConfig(t, ns, "a"), h.policyConfig(t, ns, "b")
	a := start(t, cfgA, elector.WithMetricsRegisterer(reg))
	b := start(t, cfgB, elector.WithMetricsRegisterer(reg))
	stop := r26Gauge(t, reg, ns)
	tok := h.wait(t, 20*time.Second)
	for i := range 4 {
		time.Sleep(400 * time.Millisecond)
		if err := r26Patch(t, ns, r26RemoveOp); err != nil {
			t.Fatalf("round %d: removal: %v", i, err)
		}
		if i%2 == 1 {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
		}
		if err := clientset(t).CoordinationV1().Leases(ns).Delete(context.Background(), "lock", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("round %d: delete: %v", i, err)
		}
		// a release and an acquisition may come between the removal and the deletion, then a second
		// leadership after the deletion: take the last one within 8s.
		deadline := time.After(8 * time.Second)
		got := false
	wait:
		for {
			select {
			case next := <-h.started:
				if next.Epoch <= tok.Epoch {
					t.Errorf("round %d: epoch %d after %d", i, next.Epoch, tok.Epoch)
				}
				tok, got = next, true
			case <-deadline:
				break wait
			}
		}
		if !got {
			t.Fatalf("round %d: no new leadership within 8s; %s", i, r26State(t, ns))
		}
	}
	a.stop()
	b.stop()
	if v, ok := stop(); !ok {
		t.Errorf("is_leader sampled at %v", v)
	}
	h.check(t)
}

// TestRound26LabelRemovedWhileReadsFail: the holder's reads of the Lease fail (503) once the label is
// removed, so leftTheWatch cannot tell a deletion from the removal. Invariants: the holder stops leading
// (no belief in an unguarded term), there is no tight loop of requests, and once reads work again a new
// leadership comes at a higher epoch with the label back.
func TestRound26LabelRemovedWhileReadsFail(t *testing.T) {
	ns, h := parallelLock(t)
	reg := prometheus.NewRegistry()
	var failGets atomic.Bool
	var requests atomic.Int64
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, "/leases") {
				requests.Add(1)
			}
			if failGets.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/leases/lock") {
				return nil, errors.New("round26: GET of the Lease refused")
			}
			return rt.RoundTrip(r)
		})
	}
	cfg := h.config(t, ns, "a")
	cfg.Client = electorClientset(t, ns, "a-user", wrap)
	c := start(t, cfg, elector.WithMetricsRegisterer(reg))
	tok := h.wait(t, 20*time.Second)
	failGets.Store(true)
	if err := r26Patch(t, ns, r26RemoveOp); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	before := requests.Load()
	if c.e.IsLeader() {
		l := getLease(t, ns, "lock")
		if l.Labels[protocol.FencedLabel] != "true" {
			t.Errorf("500ms after the label's removal (reads failing) the holder still leads epoch %d on an unlabelled Lease: %s", tok.Epoch, r26State(t, ns))
		}
	}
	time.Sleep(3 * time.Second)
	if n := requests.Load() - before; n > 100 {
		t.Errorf("%d requests on Leases in 3s while reads fail", n)
	}
	failGets.Store(false)
	if !r26Relabelled(t, ns, tok.Epoch, 10*time.Second) {
		t.Errorf("no leadership at an epoch above %d within 10s once reads work: %s; lost %v", tok.Epoch, r26State(t, ns),
			counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
	}
	h.check(t)
}

// TestRound26LabelRemovedWithOtherChanges: break glass removes the label and in the same write changes the
// holder, or lowers the epoch annotation, or removes the acquirer. The holder must not keep leading; a
// later acquisition (by it or a standby in the same process) is at an epoch above every one issued, with
// the label back.
func TestRound26LabelRemovedWithOtherChanges(t *testing.T) {
	holder := `{"op":"replace","path":"/spec/holderIdentity","value":"mallory"}`
	acq := "/metadata/annotations/" + strings.ReplaceAll(protocol.AcquirerAnnotation, "/", "~1")
	cases := []struct {
		name string
		ops  func(epoch int64) []string
	}{
		{"holder", func(int64) []string { return []string{r26RemoveOp, holder} }},
		{"lower epoch", func(e int64) []string {
			return []string{r26RemoveOp, fmt.Sprintf(`{"op":"replace","path":"%s","value":"%d"}`, r26Epoch, e-1)}
		}},
		{"same epoch, holder, acquirer removed", func(int64) []string {
			return []string{r26RemoveOp, `{"op":"remove","path":"` + acq + `"}`}
		}},
		{"epoch removed", func(int64) []string { return []string{r26RemoveOp, `{"op":"remove","path":"` + r26Epoch + `"}`} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			a := start(t, h.policyConfig(t, ns, "a"), elector.WithMetricsRegisterer(reg))
			b := start(t, h.policyConfig(t, ns, "b"), elector.WithMetricsRegisterer(reg))
			stop := r26Gauge(t, reg, ns)
			tok := h.wait(t, 20*time.Second)
			time.Sleep(150 * time.Millisecond) // half a retryPeriod: not when a renewal is due
			if err := r26Patch(t, ns, tc.ops(tok.Epoch)...); err != nil {
				t.Fatalf("patch: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
			for _, c := range []*candidate{a, b} {
				if c.e.IsLeader() && c.e.Token().Epoch == tok.Epoch {
					t.Errorf("%s still leads epoch %d 500ms after the patch: %s", c.e.Identity(), tok.Epoch, r26State(t, ns))
				}
			}
			select {
			case next := <-h.started:
				if next.Epoch <= tok.Epoch {
					t.Errorf("next epoch %d after %d", next.Epoch, tok.Epoch)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("no new leadership within 15s: %s; lost %v", r26State(t, ns), counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
			}
			if !r26Relabelled(t, ns, tok.Epoch, 5*time.Second) {
				t.Errorf("not labelled at a higher epoch: %s", r26State(t, ns))
			}
			a.stop()
			b.stop()
			if v, ok := stop(); !ok {
				t.Errorf("is_leader sampled at %v", v)
			}
			h.check(t)
		})
	}
}

// TestRound26LabelRemovedAtARandomTime: TestRound26LabelRemovedAtTheFirstRenewal with the removal at a
// random moment of the term (0.3s to 1.5s after the acquisition), twelve tries. Invariant: each time the
// Lease is labelled again at a higher epoch within 5s.
func TestRound26LabelRemovedAtARandomTime(t *testing.T) {
	var failed atomic.Int64
	t.Cleanup(func() { t.Logf("%d of 12 tries left the Lease unlabelled and led", failed.Load()) })
	for i := range 12 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			cfg := h.policyConfig(t, ns, "a")
			c := start(t, cfg, elector.WithMetricsRegisterer(reg))
			tok := h.wait(t, 20*time.Second)
			time.Sleep(300*time.Millisecond + time.Duration(i)*100*time.Millisecond + time.Duration(i*37%100)*time.Millisecond)
			if err := r26Patch(t, ns, r26RemoveOp); err != nil {
				t.Fatal(err)
			}
			if !r26Relabelled(t, ns, tok.Epoch, 5*time.Second) {
				failed.Add(1)
				t.Errorf("5s after break glass removed the fenced label of epoch %d: still not labelled at a higher epoch; %s; IsLeader=%t, lost %v",
					tok.Epoch, r26State(t, ns), c.e.IsLeader(), counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
			}
			h.check(t)
		})
	}
}

// TestRound26RenewalAnswersRewritten: the holder's client rewrites the answers to its renewals (PUTs of
// the Lease): a content type with parameters, a body cut short, or a content type that does not match the
// body; meanwhile a user held to the Lease policy writes an annotation of its own to the Lease every
// 100ms (conflicts). Invariants: the holder keeps the Lease at its epoch (no leadership lost), the Lease
// as stored keeps naming it at that epoch, and its renewals do not turn into a tight loop.
func TestRound26RenewalAnswersRewritten(t *testing.T) {
	cases := []struct {
		name, contentType string
		rewrite           func(resp *http.Response) error
		corrupt           bool // the answer cannot be decoded at all: the holder may lose the Lease, safely
	}{
		{"json with parameters", "application/json", func(resp *http.Response) error {
			resp.Header.Set("Content-Type", "application/json ; charset=utf-8")
			return nil
		}, false},
		{"protobuf with parameters", "application/vnd.kubernetes.protobuf", func(resp *http.Response) error {
			resp.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf;charset=binary")
			return nil
		}, false},
		{"protobuf cut short", "application/vnd.kubernetes.protobuf", func(resp *http.Response) error {
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body = io.NopCloser(bytes.NewReader(b[:len(b)/2]))
			resp.ContentLength = int64(len(b) / 2)
			resp.Header.Del("Content-Length")
			return nil
		}, true},
		{"json labelled protobuf", "application/json", func(resp *http.Response) error {
			resp.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
			return nil
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			var rewriting atomic.Bool
			var puts atomic.Int64
			_, rc := env.ElectorClient(t, ns, "a-user")
			rc.ContentType, rc.AcceptContentTypes = tc.contentType, tc.contentType
			rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
				return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					resp, err := rt.RoundTrip(r)
					if err != nil || r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/leases/lock") || !rewriting.Load() {
						return resp, err
					}
					puts.Add(1)
					if resp.StatusCode == http.StatusOK {
						if rerr := tc.rewrite(resp); rerr != nil {
							return nil, rerr
						}
					}
					return resp, nil
				})
			})
			cs, err := kubernetes.NewForConfig(rc)
			if err != nil {
				t.Fatal(err)
			}
			cfg := h.config(t, ns, "a")
			cfg.Client = cs
			c := start(t, cfg, elector.WithMetricsRegisterer(reg))
			tok := h.wait(t, 20*time.Second)
			rewriting.Store(true)
			intruder := electorClientset(t, ns, "intruder").CoordinationV1().Leases(ns)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			refused := 0
			for i := 0; ctx.Err() == nil; i++ {
				p := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/round26":"%d"}}}`, i)
				if _, err := intruder.Patch(ctx, "lock", types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
					refused++
				}
				time.Sleep(100 * time.Millisecond)
			}
			l := getLease(t, ns, "lock")
			if tc.corrupt {
				// Safety only: whenever a leads, the stored Lease names it at its token's epoch, labelled.
				if c.e.IsLeader() && (holderOf(l) != "a" || l.Annotations[protocol.EpochAnnotation] != fmt.Sprint(c.e.Token().Epoch) || l.Labels[protocol.FencedLabel] != "true") {
					t.Errorf("a leads epoch %d but the Lease is %s", c.e.Token().Epoch, r26State(t, ns))
				}
				t.Logf("%d renewal PUTs; lost %v", puts.Load(), counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
				h.check(t)
				return
			}
			if holderOf(l) != "a" || l.Annotations[protocol.EpochAnnotation] != fmt.Sprint(tok.Epoch) || l.Labels[protocol.FencedLabel] != "true" {
				t.Errorf("after 4s of rewritten answers and an intruder's writes: %s, want holder a at epoch %d", r26State(t, ns), tok.Epoch)
			}
			if lost := counterValues(t, reg, "fencekit_elector_leadership_lost_total"); len(lost) != 0 {
				t.Errorf("leaderships lost: %v", lost)
			}
			if n := puts.Load(); n > 60 {
				t.Errorf("%d renewal PUTs in 4s at retryPeriod %v", n, cfg.RetryPeriod)
			}
			t.Logf("%d renewal PUTs, %d intruder writes refused", puts.Load(), refused)
			h.check(t)
		})
	}
}

// TestRound26LabelRemovedWhileReadsAreSlow: the holder's reads of the Lease take 1s (or 3s, longer than
// its renewDeadline) for 4s once armed; break glass removes the label while a standby of the same process
// runs.
// Invariants: is_leader 0 or 1, no overlap, strictly increasing epochs, and a new leadership at a higher
// epoch with the label back within 10s.
func TestRound26LabelRemovedWhileReadsAreSlow(t *testing.T) {
	for _, delay := range []time.Duration{time.Second, 3 * time.Second} {
		t.Run(delay.String(), func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			var slow atomic.Bool
			wrap := func(rt http.RoundTripper) http.RoundTripper {
				return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					if slow.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/leases/lock") {
						select {
						case <-time.After(delay):
						case <-r.Context().Done():
							return nil, r.Context().Err()
						}
					}
					return rt.RoundTrip(r)
				})
			}
			cfgA := h.config(t, ns, "a")
			cfgA.Client = electorClientset(t, ns, "a-user", wrap)
			cfgB := h.config(t, ns, "b")
			cfgB.Client = electorClientset(t, ns, "b-user", wrap)
			a := start(t, cfgA, elector.WithMetricsRegisterer(reg))
			b := start(t, cfgB, elector.WithMetricsRegisterer(reg))
			stop := r26Gauge(t, reg, ns)
			tok := h.wait(t, 20*time.Second)
			time.Sleep(150 * time.Millisecond)
			slow.Store(true)
			if err := r26Patch(t, ns, r26RemoveOp); err != nil {
				t.Fatal(err)
			}
			// Reads slower than renewDeadline never succeed (each is bounded by it): they turn fast again
			// 4s after the removal.
			time.AfterFunc(4*time.Second, func() { slow.Store(false) })
			select {
			case next := <-h.started:
				if next.Epoch <= tok.Epoch {
					t.Errorf("next epoch %d after %d", next.Epoch, tok.Epoch)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("no new leadership within 10s: %s; lost %v", r26State(t, ns), counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
			}
			if !r26Relabelled(t, ns, tok.Epoch, 5*time.Second) {
				t.Errorf("not labelled at a higher epoch: %s", r26State(t, ns))
			}
			slow.Store(false)
			a.stop()
			b.stop()
			if v, ok := stop(); !ok {
				t.Errorf("is_leader sampled at %v", v)
			}
			t.Logf("lost %v", counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
			h.check(t)
		})
	}
}

// failingBody is a watch stream that fails once down is set.
type failingBody struct {
	io.ReadCloser
	down *atomic.Bool
}

func (b failingBody) Read(p []byte) (int, error) {
	if b.down.Load() {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.ReadCloser.Read(p)
	if b.down.Load() {
		return 0, io.ErrUnexpectedEOF
	}
	return n, err
}

// TestRound26LabelRemovedWhileTheWatchIsDown: the holder's watch of Leases breaks (its stream fails and
// new watches are refused; lists still work, so the informer relists) for 3s, during which break glass
// removes the fenced label; then the watch works again. Invariant (decision 0072): the holder's term at
// that epoch ends and, once its watch is back, the Lease is labelled again at a higher epoch within 8s.
func TestRound26LabelRemovedWhileTheWatchIsDown(t *testing.T) {
	ns, h := parallelLock(t)
	reg := prometheus.NewRegistry()
	var down atomic.Bool
	wrap := func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			isWatch := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
			if isWatch && down.Load() {
				return nil, errors.New("round26: watch refused")
			}
			resp, err := rt.RoundTrip(r)
			if err == nil && isWatch {
				resp.Body = failingBody{ReadCloser: resp.Body, down: &down}
			}
			return resp, err
		})
	}
	cfg := h.config(t, ns, "a")
	cfg.Client = electorClientset(t, ns, "a-user", wrap)
	c := start(t, cfg, elector.WithMetricsRegisterer(reg))
	tok := h.wait(t, 20*time.Second)
	down.Store(true)
	time.Sleep(time.Second)
	if err := r26Patch(t, ns, r26RemoveOp); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	leadingUnlabelled := c.e.IsLeader() && c.e.Token().Epoch == tok.Epoch
	down.Store(false)
	if !r26Relabelled(t, ns, tok.Epoch, 8*time.Second) {
		t.Errorf("8s after the watch came back (the fenced label of epoch %d removed while it was down): still not labelled at a higher epoch; %s; IsLeader=%t (epoch %d), lost %v",
			tok.Epoch, r26State(t, ns), c.e.IsLeader(), c.e.Token().Epoch, counterValues(t, reg, "fencekit_elector_leadership_lost_total"))
	}
	t.Logf("2s after the removal, with the watch down, a still led epoch %d: %t", tok.Epoch, leadingUnlabelled)
	h.check(t)
}
