package elector_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/test/util/testenv"
)

// clientsetThrough is an admin clientset whose every request goes through intercept, which is given the
// real transport rt to pass the request on (or not).
func clientsetThrough(t *testing.T, intercept func(rt http.RoundTripper, r *http.Request) (*http.Response, error)) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) { return intercept(rt, r) })
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// The leader is cut off from the apiserver (every request fails): it keeps its authority only until its
// deadline, stepping down before a standby, which still reaches the apiserver, takes over at expiry. The
// leaderships never overlap.
func TestPartitionedLeaderStepsDownBeforeTakeover(t *testing.T) {
	ns, h := parallelLock(t)
	var cut atomic.Bool
	lc := h.config(t, ns, "partitioned")
	lc.Client = clientsetThrough(t, func(rt http.RoundTripper, r *http.Request) (*http.Response, error) {
		if cut.Load() {
			return nil, errors.New("network partition")
		}
		return rt.RoundTrip(r)
	})
	leader := start(t, lc)
	first := h.wait(t, 15*time.Second)
	if first.Holder != "partitioned" {
		t.Fatalf("first leader %v", first)
	}
	start(t, h.config(t, ns, "standby"))
	time.Sleep(time.Second) // the standby observes a renewal or two

	cut.Store(true)
	second := h.wait(t, 15*time.Second)
	if second.Holder != "standby" || second.Epoch != first.Epoch+1 {
		t.Errorf("takeover %v after %v", second, first)
	}
	if leader.e.IsLeader() || !leader.e.Token().IsZero() {
		t.Errorf("the partitioned leader still reports %v", leader.e.Token())
	}
	h.check(t) // in particular: the partitioned leader's context ended before the standby started
}

// An acquisition's request that never gets an answer (a connection that died while the process was
// paused, an apiserver that stopped answering) is abandoned after RenewDeadline and tried again, instead
// of holding the elector for ever; once the apiserver answers again, the elector acquires.
func TestHungAcquisitionIsAbandoned(t *testing.T) {
	ns, h := parallelLock(t)
	var hang atomic.Bool
	var abandoned atomic.Int32
	hang.Store(true)
	lc := h.config(t, ns, "hung")
	lc.Client = clientsetThrough(t, func(rt http.RoundTripper, r *http.Request) (*http.Response, error) {
		if hang.Load() && r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/leases") {
			<-r.Context().Done() // no answer until the client gives up
			abandoned.Add(1)
			return nil, r.Context().Err()
		}
		return rt.RoundTrip(r)
	})
	start(t, lc)
	testenv.Eventually(t, "two hung acquisitions abandoned", func() (bool, string) {
		n := abandoned.Load()
		return n >= 2, fmt.Sprintf("%d abandoned", n)
	})
	hang.Store(false)
	if got := h.wait(t, 15*time.Second); got.Holder != "hung" {
		t.Errorf("leader %v, want hung", got)
	}
}
