package elector_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// While an elector leads, break glass (the only user fencekit's Lease policy lets do it) removes the fenced
// label from the held Lease, which leaves the label-selected shared watch as if deleted, and whose epoch
// no policy guards from then on. The holder reads the Lease, steps down (fenced_label_removed) and, as the
// Lease still names it with its own annotations, releases it and acquires a new term at once: the label
// and its own annotations are written again at a higher epoch, well before the Lease would have expired
// (a leaseDuration of 30 s). The same removal with the acquirer annotation changed in the same write is
// not the holder's Lease any more: it steps down without releasing, and a later acquisition (at expiry)
// writes the label and its own annotations at a higher epoch.
func TestFencedLabelRemovedFromAHeldLease(t *testing.T) {
	label := "/metadata/labels/" + strings.ReplaceAll(protocol.FencedLabel, "/", "~1")
	acquirer := "/metadata/annotations/" + strings.ReplaceAll(protocol.AcquirerAnnotation, "/", "~1")
	cases := []struct {
		name, patch   string
		leaseDuration time.Duration
		released      bool
	}{
		{"the label alone", `[{"op":"remove","path":"` + label + `"}]`, 30 * time.Second, true},
		{"the label and the acquirer", `[{"op":"remove","path":"` + label + `"},{"op":"replace","path":"` + acquirer + `","value":"mallory"}]`, 2 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			var stopped atomic.Int64
			cfg := h.policyConfig(t, ns, "a")
			cfg.LeaseDuration = tc.leaseDuration
			cfg.OnStoppedLeading = func() { stopped.Add(1) }
			start(t, cfg, elector.WithMetricsRegisterer(reg))
			tok := h.wait(t, 20*time.Second)
			before := getLease(t, ns, "lock")
			patched := time.Now()
			if _, err := clientset(t).CoordinationV1().Leases(ns).Patch(t.Context(), "lock", types.JSONPatchType, []byte(tc.patch), metav1.PatchOptions{}); err != nil {
				t.Fatalf("break glass patching the held Lease with %s: %v", tc.patch, err)
			}
			within := tc.leaseDuration / 2
			if !tc.released {
				within = 4 * tc.leaseDuration
			}
			next := h.wait(t, within)
			// Not released, the Lease is acquired again at its expiry, measured from a read after the patch.
			if waited := time.Since(patched); !tc.released && waited < tc.leaseDuration {
				t.Errorf("the next term began %v after the patch, before the Lease's leaseDuration %v: it was released", waited, tc.leaseDuration)
			}
			if stopped.Load() != 1 || next.Epoch <= tok.Epoch {
				t.Errorf("after break glass patched the Lease held at epoch %d: %d leaderships stopped, next epoch %d", tok.Epoch, stopped.Load(), next.Epoch)
			}
			eventually(t, 10*cfg.RetryPeriod, "the next acquisition written", func() bool {
				l := getLease(t, ns, "lock")
				return l.Labels[protocol.FencedLabel] == "true" && l.Annotations[protocol.AcquirerAnnotation] == before.Annotations[protocol.AcquirerAnnotation] &&
					l.Annotations[protocol.EpochAnnotation] == fmt.Sprint(next.Epoch)
			})
			lost := counterValues(t, reg, "fencekit_elector_leadership_lost_total")
			if len(lost) != 1 || !strings.Contains(fmt.Sprint(lost), "fenced_label_removed") {
				t.Errorf("leaderships lost: %v, want one, fenced_label_removed", lost)
			}
			h.check(t)
		})
	}
}

// Break glass removes the fenced label while the holder's renewal is on its way (held in the client's
// transport until the removal is done and the watch has reported the Lease gone). The renewal's
// compare-and-swap conflicts and the holder renews on its term (a JSON patch testing the holder and the
// epoch, which the unlabelled Lease passes), or, when that patch fails, re-reads the Lease: either way the
// answer is newer than the deletion the watch reported, and it is the version without the label that ends
// the term. The Lease is labelled again at a higher epoch, as when the watch reports the removal.
func TestFencedLabelRemovedDuringARenewal(t *testing.T) {
	for _, patchFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("patch fails=%t", patchFails), func(t *testing.T) {
			ns, h := parallelLock(t)
			reg := prometheus.NewRegistry()
			var holdPut, failPatch atomic.Bool
			held, resume := make(chan struct{}), make(chan struct{})
			wrap := func(rt http.RoundTripper) http.RoundTripper {
				return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
					if strings.HasSuffix(r.URL.Path, "/leases/lock") {
						if r.Method == http.MethodPut && holdPut.CompareAndSwap(true, false) {
							close(held)
							<-resume
						}
						if r.Method == http.MethodPatch && failPatch.CompareAndSwap(true, false) {
							return nil, errors.New("the renewal's patch failed in the transport")
						}
					}
					return rt.RoundTrip(r)
				})
			}
			cfg := h.config(t, ns, "a")
			cfg.Client = electorClientset(t, ns, "a-user", wrap)
			cfg.LeaseDuration = 30 * time.Second
			start(t, cfg, elector.WithMetricsRegisterer(reg))
			tok := h.wait(t, 20*time.Second)
			failPatch.Store(patchFails)
			holdPut.Store(true)
			select {
			case <-held:
			case <-time.After(10 * cfg.RetryPeriod):
				t.Fatalf("no renewal within %v", 10*cfg.RetryPeriod)
			}
			p := `[{"op":"remove","path":"/metadata/labels/` + strings.ReplaceAll(protocol.FencedLabel, "/", "~1") + `"}]`
			_, err := clientset(t).CoordinationV1().Leases(ns).Patch(t.Context(), "lock", types.JSONPatchType, []byte(p), metav1.PatchOptions{})
			time.Sleep(300 * time.Millisecond) // the watch reports the Lease gone meanwhile
			close(resume)
			if err != nil {
				t.Fatalf("break glass removing the fenced label: %v", err)
			}
			next := h.wait(t, cfg.LeaseDuration/2)
			if next.Epoch <= tok.Epoch {
				t.Errorf("the next term's epoch %d is not above %d", next.Epoch, tok.Epoch)
			}
			eventually(t, 10*cfg.RetryPeriod, "the Lease labelled again at the next epoch", func() bool {
				l := getLease(t, ns, "lock")
				return l.Labels[protocol.FencedLabel] == "true" && l.Annotations[protocol.EpochAnnotation] == fmt.Sprint(next.Epoch)
			})
			if lost := counterValues(t, reg, "fencekit_elector_leadership_lost_total"); len(lost) != 1 || !strings.Contains(fmt.Sprint(lost), "fenced_label_removed") {
				t.Errorf("leaderships lost: %v, want one, fenced_label_removed", lost)
			}
			h.check(t)
		})
	}
}

// counterValues returns the nonzero series of the counter name in reg, by their labels.
func counterValues(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v != 0 {
				out[fmt.Sprint(m.GetLabel())] = v
			}
		}
	}
	return out
}
