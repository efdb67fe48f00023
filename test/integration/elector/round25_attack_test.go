//go:build openholes

package elector_test

// Round 25 of the independent attacker, against f481740 (a process orders its leaderships of a Lease:
// takeLeadership/leadershipKeyOf in pkg/elector/leading.go, the leadership goroutine of startLeading, the
// giveBack of endTerm; decision 0070). Each test asserts the invariant it tries to break; every test runs
// alone (none is parallel), so that the goroutine census (no goroutine left in takeLeadership once the Runs
// returned) sees only its own electors.
//
// At f481740 attack 1 worked (TestRound25OneAddressTwoClusters failed, every run): leadershipKeyOf keys a
// Lease by the apiserver address alone, so two clusters behind one address (a gateway that routes by
// credentials or SNI, or two private endpoints with one address reached through two proxies or dialers) are
// one key, and an elector that acquired and renews its Lease in one cluster never started leading while the
// process led the Lease of that namespace and name in the other. Closed in the next commit: the wait is
// bounded by the other leadership's safe-work deadline plus its ReleaseTimeout (takeLeadership; decision
// 0070), after which the elector leads beside it and says so. All seven hold there (also under -race).
//
// The tests run under -tags openholes, with the other rounds' probes that bound the real clock (a holder's
// cleanup of seconds that the other elector must act within): the ordering and its bound are tested in
// make test by TestTakeLeadership and TestTakeLeadershipWaitsNoLongerThanTheBound (pkg/elector, fake
// clock) and TestALeadersCleanupDelaysTheNextLeaderOfItsProcess (takeover_order_test.go).
//
//  1. TestRound25OneAddressTwoClusters: one gateway address in front of two clusters (the gateway routes by
//     the client's credentials, here a header; cluster "b" is emulated by rewriting the namespace). A process
//     leads ns/lock in cluster a and runs an elector of ns/lock in cluster b through the same address.
//     Invariant (decision 0070: "two clusters are not [ordered]: a process that leads ns/lock in two clusters
//     must not wait on itself"; no lockout): b, which acquires and renews its own Lease, starts leading.
//     A control runs b through a second address of the same gateway first.
//  2. TestRound25RunCancelledWhileWaitingForTheSlot: the holder's OnStartedLeading cleans up for 3 s after
//     its context ended; the Lease is deleted, the other elector creates it and waits in takeLeadership;
//     its Run is cancelled while it waits. Invariants: its Run returns promptly, leaves no goroutine in
//     takeLeadership, releases the Lease, never called OnStartedLeading; the slot is not left taken (the
//     first elector leads again, the second leads after a graceful handover).
//  3. TestRound25PostAcquireFailsWhileTheHolderCleansUp: the acquirer's PostAcquire fails (an error, then a
//     timeout) while the previous holder of the process cleans up. Invariant: no lockout, no overlap.
//  4. TestRound25TermEndsWhileWaiting: the acquirer's term ends while it waits for the slot, (a) its
//     renewals hang until the renew deadline, (b) its loop stalls (OnNewLeader) past the safe-work deadline.
//     Invariants: the waiting goroutine leaves, a leader follows, no overlap, the counts agree.
//  5. TestRound25SameElectorReacquires: one elector, the Lease deleted under it repeatedly: it must not wait
//     on itself; (a) its cleanup within ReleaseTimeout, (b) a callback that ignores its context past
//     ReleaseTimeout (the one case where it may run beside its own next leadership).
//  6. TestRound25GracefulHandoverStaysImmediate: Run cancelled on the holder, three handovers between two
//     electors of the process with a 400 ms cleanup: the next starts well before the Lease could expire, and
//     only after the previous OnStartedLeading returned.
//  7. TestRound25Chaos: three electors of one process on one registry, 20 s of random deletions, forged
//     releases, forged holders and Runs cancelled and run again at any moment, callbacks with random cleanup
//     (under ReleaseTimeout), one elector's PostAcquire failing or hanging one time in three.
//     Invariants: OnStartedLeading never overlaps, IsLeader is never true for two, is_leader never sampled
//     above 1 and 0 at the end, OnStoppedLeading once per OnStartedLeading, a leader within 10 s after each
//     burst, no goroutine left in takeLeadership.
//
// Every test also samples, every millisecond, is_leader (never above 1) and IsLeader of every elector of the
// Lease (never two at once), and checks OnStartedLeading never starts beside another of the Lease.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// r25proc is one process's electors of one Lease (ns/lock as their configs name it) on one registry: it
// records their leaderships and samples is_leader and IsLeader.
type r25proc struct {
	t   *testing.T
	ns  string
	reg *prometheus.Registry
	// allowSelf: an elector's OnStartedLeading may start beside its own previous one (it ignores its context
	// past ReleaseTimeout).
	allowSelf bool

	mu       sync.Mutex
	inFlight map[string]int // OnStartedLeading calls running, by identity
	live     int            // OnStartedLeading calls whose leadership context has not ended
	started  map[string]int
	stopped  map[string]int
	findings []string
	electors []*r25elector
	startCh  chan elector.Token

	stopSampler context.CancelFunc
	samplerDone chan struct{}
}

func newR25Proc(t *testing.T, ns string) *r25proc {
	p := &r25proc{t: t, ns: ns, reg: prometheus.NewRegistry(), inFlight: map[string]int{}, started: map[string]int{},
		stopped: map[string]int{}, startCh: make(chan elector.Token, 1000), samplerDone: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	p.stopSampler = cancel
	go p.sample(ctx)
	t.Cleanup(func() {
		for _, x := range p.list() {
			x.stop(30 * time.Second)
		}
		cancel()
		<-p.samplerDone
	})
	return p
}

func (p *r25proc) findf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if len(p.findings) < 20 {
		p.findings = append(p.findings, msg)
	}
}

func (p *r25proc) list() []*r25elector {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*r25elector(nil), p.electors...)
}

// sample checks, every millisecond, that is_leader of the Lease is 0 or 1 and that no two electors report
// IsLeader at once (read twice: a true in both reads of two electors is an overlap on the interval between).
func (p *r25proc) sample(ctx context.Context) {
	defer close(p.samplerDone)
	lease := p.ns + "/lock"
	for ctx.Err() == nil {
		if v := leaseGauge(p.reg, "fencekit_elector_is_leader", lease); v != -999 && (v < 0 || v > 1) {
			p.mu.Lock()
			p.findf("is_leader sampled at %v", v)
			p.mu.Unlock()
		}
		xs := p.list()
		first := make([]bool, len(xs))
		for i, x := range xs {
			first[i] = x.e.IsLeader()
		}
		var both []string
		for i, x := range xs {
			if first[i] && x.e.IsLeader() {
				both = append(both, x.id)
			}
		}
		if len(both) > 1 {
			p.mu.Lock()
			p.findf("IsLeader true for %v at once", both)
			p.mu.Unlock()
		}
		time.Sleep(time.Millisecond)
	}
}

// r25elector is one elector of a r25proc, which can be Run, stopped and Run again.
type r25elector struct {
	p  *r25proc
	id string
	e  *elector.Elector

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// add makes an elector of identity id from cfg, recording its leaderships; its OnStartedLeading waits for
// its context and then for cleanup() (nil: none).
func (p *r25proc) add(id string, cfg elector.Config, cleanup func() time.Duration) *r25elector {
	p.t.Helper()
	cfg.Identity = id
	cfg.OnStartedLeading = p.lead(id, cleanup)
	cfg.OnStoppedLeading = func() {
		p.mu.Lock()
		p.stopped[id]++
		p.mu.Unlock()
	}
	e, err := elector.New(cfg, elector.WithMetricsRegisterer(p.reg), elector.WithLogger(logr.Discard()))
	if err != nil {
		p.t.Fatal(err)
	}
	x := &r25elector{p: p, id: id, e: e}
	p.mu.Lock()
	p.electors = append(p.electors, x)
	p.mu.Unlock()
	return x
}

func (p *r25proc) lead(id string, cleanup func() time.Duration) func(context.Context, elector.Token) {
	return func(ctx context.Context, tok elector.Token) {
		p.mu.Lock()
		for other, n := range p.inFlight {
			if n > 0 && (other != id || !p.allowSelf) {
				p.findf("%s started leading at epoch %d while %d OnStartedLeading of %s still ran", id, tok.Epoch, n, other)
			}
		}
		p.inFlight[id]++
		p.started[id]++
		p.live++
		p.mu.Unlock()
		select {
		case p.startCh <- tok:
		default:
		}
		<-ctx.Done()
		p.mu.Lock()
		p.live--
		p.mu.Unlock()
		if cleanup != nil {
			time.Sleep(cleanup())
		}
		p.mu.Lock()
		p.inFlight[id]--
		p.mu.Unlock()
	}
}

func (x *r25elector) run() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done != nil {
		select {
		case <-x.done:
		default:
			x.p.t.Errorf("run %s: already running", x.id)
			return
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	x.cancel, x.done = cancel, done
	go func() {
		defer close(done)
		if err := x.e.Run(ctx); err != nil {
			x.p.t.Errorf("Run(%s): %v", x.id, err)
		}
	}()
}

// stop cancels the Run and waits for it to return (at most within); it returns how long that took.
func (x *r25elector) stop(within time.Duration) time.Duration {
	x.mu.Lock()
	cancel, done := x.cancel, x.done
	x.mu.Unlock()
	if cancel == nil {
		return 0
	}
	began := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(within):
		x.p.t.Errorf("Run(%s) did not return within %v of its context's end", x.id, within)
		<-done
	}
	return time.Since(began)
}

func (x *r25elector) running() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.done == nil {
		return false
	}
	select {
	case <-x.done:
		return false
	default:
		return true
	}
}

// waitStart waits for the next OnStartedLeading.
func (p *r25proc) waitStart(t *testing.T, within time.Duration) (elector.Token, bool) {
	t.Helper()
	select {
	case tok := <-p.startCh:
		return tok, true
	case <-time.After(within):
		return elector.Token{}, false
	}
}

func (p *r25proc) mustStart(t *testing.T, within time.Duration, what string) elector.Token {
	t.Helper()
	tok, ok := p.waitStart(t, within)
	if !ok {
		t.Fatalf("%s: nobody started leading within %v; %s", what, within, p.state(t))
	}
	return tok
}

// waitLeading waits until an OnStartedLeading runs with a live context: the lockout detector.
func (p *r25proc) waitLeading(t *testing.T, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		live := p.live
		p.mu.Unlock()
		if live > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("LOCKOUT? %s: no elector leads %v later; %s", what, within, p.state(t))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// state describes the Lease (as stored), the leaderships and the goroutines in takeLeadership.
func (p *r25proc) state(t *testing.T) string {
	var b strings.Builder
	l, err := clientset(t).CoordinationV1().Leases(p.ns).Get(context.Background(), "lock", metav1.GetOptions{})
	switch {
	case err != nil:
		fmt.Fprintf(&b, "Lease %s/lock: %v", p.ns, err)
	default:
		fmt.Fprintf(&b, "Lease %s/lock: holder %q epoch %s renewTime %v", p.ns, holderOf(l), l.Annotations["fencing.fencekit.io/epoch"], l.Spec.RenewTime)
	}
	p.mu.Lock()
	fmt.Fprintf(&b, "; callbacks running %v, live %d, started %v, stopped %v", p.inFlight, p.live, p.started, p.stopped)
	p.mu.Unlock()
	for _, x := range p.list() {
		fmt.Fprintf(&b, "; %s running=%v IsLeader=%v", x.id, x.running(), x.e.IsLeader())
	}
	fmt.Fprintf(&b, "; %d goroutines in takeLeadership", len(r25Waiters()))
	return b.String()
}

// finish stops every elector, waits for their callbacks, and checks what the process recorded.
func (p *r25proc) finish(t *testing.T) {
	t.Helper()
	for _, x := range p.list() {
		x.stop(30 * time.Second)
	}
	if w := r25Waiters(); len(w) > 0 {
		t.Errorf("%d goroutines still wait in takeLeadership after every Run returned:\n%s", len(w), strings.Join(w, "\n\n"))
	}
	eventually(t, 15*time.Second, "every OnStartedLeading to return", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, n := range p.inFlight {
			if n != 0 {
				return false
			}
		}
		return true
	})
	p.stopSampler()
	<-p.samplerDone
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.findings {
		t.Error(f)
	}
	for id, n := range p.started {
		if p.stopped[id] != n {
			t.Errorf("%s: OnStartedLeading called %d times, OnStoppedLeading %d", id, n, p.stopped[id])
		}
	}
	for id, n := range p.stopped {
		if p.started[id] == 0 && n != 0 {
			t.Errorf("%s: OnStoppedLeading called %d times, OnStartedLeading never", id, n)
		}
	}
	if v := leaseGauge(p.reg, "fencekit_elector_is_leader", p.ns+"/lock"); v != 0 && v != -999 {
		t.Errorf("is_leader = %v once every Run returned", v)
	}
}

// r25Waiters is the stacks of the goroutines in takeLeadership.
func r25Waiters() []string {
	buf := make([]byte, 8<<20)
	n := runtime.Stack(buf, true)
	var out []string
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, "pkg/elector.takeLeadership(") {
			out = append(out, g)
		}
	}
	return out
}

// r25Lost reads leadership_lost_total{lease, reason}.
func r25Lost(reg *prometheus.Registry, lease, reason string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != "fencekit_elector_leadership_lost_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var l, r string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "lease":
					l = lp.GetValue()
				case "reason":
					r = lp.GetValue()
				}
			}
			if l == lease && r == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// r25Edit changes the Lease ns/lock as an admin (a non-holder); false if there is none.
func r25Edit(t *testing.T, ns string, change func(l *coordinationLease)) bool {
	t.Helper()
	cs := clientset(t)
	found := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := cs.CoordinationV1().Leases(ns).Get(t.Context(), "lock", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		change(l)
		_, err = cs.CoordinationV1().Leases(ns).Update(t.Context(), l, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			found = false
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatalf("editing Lease %s/lock: %v", ns, err)
	}
	return found
}

// r25Holder is the holder of the stored Lease ns/name ("" if none, "<absent>" if there is no Lease).
func r25Holder(t *testing.T, ns, name string) string {
	l, err := clientset(t).CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "<absent>"
	}
	if err != nil {
		t.Fatalf("reading Lease %s/%s: %v", ns, name, err)
	}
	return holderOf(l)
}

func r25DeleteIfPresent(t *testing.T, ns string) {
	err := clientset(t).CoordinationV1().Leases(ns).Delete(t.Context(), "lock", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting Lease %s/lock: %v", ns, err)
	}
}

// ---------------------------------------------------------------------------------------------------------
// 1. One address, two clusters.

const r25ClusterHeader = "X-Round25-Cluster"

// r25Gateway is a gateway in front of "two clusters" at one address: a request that says it is for cluster
// b (its client's credentials, here a header) reaches cluster b, emulated on the test's apiserver by
// reading and writing namespace nsB where the client names nsA (the two names have the same length, so
// bodies, JSON or protobuf, keep their length); other requests reach cluster a, the apiserver as is.
func r25Gateway(t *testing.T, nsA, nsB string) string {
	t.Helper()
	target, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	from, to := "/namespaces/"+nsA+"/", "/namespaces/"+nsB+"/"
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			cluster := pr.In.Header.Get(r25ClusterHeader)
			pr.SetURL(target)
			pr.Out.Header.Del(r25ClusterHeader)
			if cluster != "b" {
				return
			}
			if p := pr.Out.URL.Path + "/"; strings.Contains(p, from) {
				pr.Out.URL.Path = strings.TrimSuffix(strings.Replace(p, from, to, 1), "/")
				pr.Out.URL.RawPath = ""
			}
			if pr.Out.Body != nil && pr.Out.Body != http.NoBody {
				body, err := io.ReadAll(pr.Out.Body)
				_ = pr.Out.Body.Close()
				if err == nil {
					body = bytes.ReplaceAll(body, []byte(nsA), []byte(nsB))
					pr.Out.Body = io.NopCloser(bytes.NewReader(body))
					pr.Out.ContentLength = int64(len(body))
				}
			}
		},
		Transport:     rt,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0), // cancelled watches
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

// r25GatewayClient is a client of cluster (a or b) through the gateway at address.
func r25GatewayClient(t *testing.T, address, cluster string) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: address, QPS: -1}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set(r25ClusterHeader, cluster)
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestRound25OneAddressTwoClusters(t *testing.T) {
	nsA, nsB := env.Namespace(t), env.Namespace(t)
	if len(nsA) != len(nsB) {
		t.Fatalf("namespaces %q and %q differ in length: the emulation needs equal lengths", nsA, nsB)
	}
	gw, gw2 := r25Gateway(t, nsA, nsB), r25Gateway(t, nsA, nsB)
	// Two processes' worth of bookkeeping, one per cluster: the Lease "nsA/lock" of cluster a and the Lease
	// "nsA/lock" of cluster b are two Leases (stored as nsA/lock and nsB/lock).
	pa, pb := newR25Proc(t, nsA), newR25Proc(t, nsA)
	cfg := func(cluster, address string) elector.Config {
		c := shortConfig(t, nsA, "lock", "")
		c.Client = r25GatewayClient(t, address, cluster)
		return c
	}
	a := pa.add("a", cfg("a", gw), nil)
	a.run()
	if tok := pa.mustStart(t, 20*time.Second, "a on cluster a"); tok.Holder != "a" {
		t.Fatalf("cluster a: %s leads", tok.Holder)
	}
	if h := r25Holder(t, nsA, "lock"); h != "a" {
		t.Fatalf("cluster a's Lease names %q", h)
	}
	if h := r25Holder(t, nsB, "lock"); h != "<absent>" {
		t.Fatalf("cluster b's Lease exists before any elector of cluster b ran: holder %q", h)
	}

	// Control: an elector of cluster b through another address of the gateway leads beside a (the
	// emulation works, and two addresses are not ordered).
	ctl := pb.add("b-control", cfg("b", gw2), nil)
	ctl.run()
	tok, ok := pb.waitStart(t, 10*time.Second)
	if !ok {
		t.Fatalf("control: an elector of cluster b through a second gateway address did not lead within 10s; %s", pb.state(t))
	}
	t.Logf("control: b-control leads cluster b's Lease at epoch %d through %s beside a (cluster a, %s)", tok.Epoch, gw2, gw)
	if h := r25Holder(t, nsB, "lock"); h != "b-control" {
		t.Fatalf("control: cluster b's Lease (stored as %s/lock) names %q", nsB, h)
	}
	ctl.stop(10 * time.Second)

	// The attack: the same elector of cluster b through the address a's client uses.
	b := pb.add("b", cfg("b", gw), nil)
	b.run()
	began := time.Now()
	if tok, ok := pb.waitStart(t, 10*time.Second); ok {
		t.Logf("b leads cluster b's Lease at epoch %d beside a: not ordered with it", tok.Epoch)
	} else {
		hold := func() (string, time.Time) {
			l := getLease(t, nsB, "lock")
			var rt time.Time
			if l.Spec.RenewTime != nil {
				rt = l.Spec.RenewTime.Time
			}
			return holderOf(l), rt
		}
		h1, r1 := hold()
		time.Sleep(time.Second)
		h2, r2 := hold()
		t.Errorf("LOCKOUT: b holds its own Lease in cluster b (stored %s/lock: holder %q, renewTime %v then %q, %v: renewing=%v) "+
			"but has not started leading %v after it ran; IsLeader=%v; %d goroutines wait in takeLeadership: its leadership waits for a's "+
			"leadership of the Lease %s/lock of cluster a, which it reaches through the same address (%s): leadershipKeyOf "+
			"(pkg/elector/leading.go) keys by the address alone",
			nsB, h1, r1.Format(time.RFC3339Nano), h2, r2.Format(time.RFC3339Nano), h2 == "b" && r2.After(r1),
			time.Since(began).Round(time.Millisecond), b.e.IsLeader(), len(r25Waiters()), nsA, gw)
		stoppingA := time.Now()
		a.stop(10 * time.Second)
		if _, ok := pb.waitStart(t, 10*time.Second); ok {
			t.Logf("b started leading cluster b's Lease within %v of a's Run (cluster a) being cancelled", time.Since(stoppingA).Round(time.Millisecond))
		}
	}
	pb.finish(t)
	pa.finish(t)
}

// ---------------------------------------------------------------------------------------------------------
// 2. Run cancelled while waiting in takeLeadership.

func TestRound25RunCancelledWhileWaitingForTheSlot(t *testing.T) {
	ns := env.Namespace(t)
	p := newR25Proc(t, ns)
	cfgA := shortConfig(t, ns, "lock", "")
	cfgA.ReleaseTimeout = 8 * time.Second
	a := p.add("a", cfgA, func() time.Duration { return 3 * time.Second })
	b := p.add("b", shortConfig(t, ns, "lock", ""), nil)
	a.run()
	if tok := p.mustStart(t, 20*time.Second, "a"); tok.Holder != "a" {
		t.Fatalf("%s leads", tok.Holder)
	}
	b.run()
	time.Sleep(700 * time.Millisecond) // b is a standby that watches the Lease
	deleted := time.Now()
	deleteLease(t, ns)
	eventually(t, 2500*time.Millisecond, "b to create the Lease while a cleans up", func() bool { return r25Holder(t, ns, "lock") == "b" })
	var waiters []string
	eventually(t, time.Second, "b's leadership goroutine to wait in takeLeadership", func() bool {
		waiters = r25Waiters()
		return len(waiters) > 0
	})
	if b.e.IsLeader() {
		t.Errorf("b reports IsLeader while it waits for a's cleanup")
	}
	t.Logf("b holds the Lease %v after the deletion and waits in takeLeadership (%d goroutines); cancelling its Run", time.Since(deleted).Round(time.Millisecond), len(waiters))
	took := b.stop(10 * time.Second)
	t.Logf("b's Run returned %v after its context was cancelled", took.Round(time.Millisecond))
	if took > 1500*time.Millisecond {
		t.Errorf("b's Run took %v to return, cancelled while it waited for the slot (it waited for a's cleanup?)", took)
	}
	if w := r25Waiters(); len(w) > 0 {
		t.Errorf("LEAK: %d goroutines still wait in takeLeadership after b's Run returned:\n%s", len(w), strings.Join(w, "\n\n"))
	}
	eventually(t, 2*time.Second, "b to have released the Lease", func() bool { return r25Holder(t, ns, "lock") == "" })
	p.mu.Lock()
	if p.started["b"] != 0 || p.stopped["b"] != 0 {
		t.Errorf("b, cancelled while waiting, called OnStartedLeading %d and OnStoppedLeading %d times", p.started["b"], p.stopped["b"])
	}
	p.mu.Unlock()
	// The slot is free once a's cleanup ended: a leads again.
	if tok := p.mustStart(t, 10*time.Second, "a after b's cancelled wait"); tok.Holder != "a" {
		t.Errorf("%s leads, want a", tok.Holder)
	}
	// And b leads after a graceful handover.
	b.run()
	time.Sleep(700 * time.Millisecond)
	a.stop(15 * time.Second)
	stopped := time.Now()
	if tok := p.mustStart(t, 3*time.Second, "b after a's Run returned"); tok.Holder != "b" {
		t.Errorf("%s leads, want b", tok.Holder)
	}
	t.Logf("b leads %v after a's Run returned", time.Since(stopped).Round(time.Millisecond))
	p.finish(t)
}

// ---------------------------------------------------------------------------------------------------------
// 3. PostAcquire fails while the previous holder of the process cleans up.

func TestRound25PostAcquireFailsWhileTheHolderCleansUp(t *testing.T) {
	ns := env.Namespace(t)
	p := newR25Proc(t, ns)
	cfgA := shortConfig(t, ns, "lock", "")
	cfgA.ReleaseTimeout = 8 * time.Second
	var cleaningUp atomic.Bool
	a := p.add("a", cfgA, func() time.Duration { cleaningUp.Store(true); return 2500 * time.Millisecond })
	cfgB := shortConfig(t, ns, "lock", "")
	cfgB.PostAcquireTimeout = 700 * time.Millisecond
	var calls, failedDuringCleanup atomic.Int32
	cfgB.PostAcquire = elector.AcquireHook(func(ctx context.Context, tok elector.Token) error {
		n := calls.Add(1)
		var err error
		switch n {
		case 1:
			err = errors.New("injected PostAcquire failure")
		case 2:
			<-ctx.Done()
			err = ctx.Err()
		}
		if err != nil && cleaningUp.Load() {
			failedDuringCleanup.Add(1)
		}
		return err
	})
	b := p.add("b", cfgB, nil)
	a.run()
	if tok := p.mustStart(t, 20*time.Second, "a"); tok.Holder != "a" {
		t.Fatalf("%s leads", tok.Holder)
	}
	b.run()
	time.Sleep(700 * time.Millisecond)
	deleted := time.Now()
	deleteLease(t, ns)
	tok := p.mustStart(t, 10*time.Second, "after the deletion")
	t.Logf("%s leads at epoch %d, %v after the deletion; PostAcquire ran %d times, %d failed while a cleaned up",
		tok.Holder, tok.Epoch, time.Since(deleted).Round(time.Millisecond), calls.Load(), failedDuringCleanup.Load())
	if failedDuringCleanup.Load() == 0 {
		t.Logf("note: no PostAcquire failure fell within a's cleanup this run")
	}
	p.waitLeading(t, 10*time.Second, "after the PostAcquire failures")
	p.finish(t)
}

// ---------------------------------------------------------------------------------------------------------
// 4. The waiting term ends: renewals hang (renew deadline), or the loop stalls past the safe-work deadline.

func TestRound25TermEndsWhileWaiting(t *testing.T) {
	t.Run("renewals hang", func(t *testing.T) {
		ns := env.Namespace(t)
		p := newR25Proc(t, ns)
		cfgA := shortConfig(t, ns, "lock", "")
		cfgA.ReleaseTimeout = 8 * time.Second
		a := p.add("a", cfgA, func() time.Duration { return 3500 * time.Millisecond })
		var block atomic.Bool
		cfgB := shortConfig(t, ns, "lock", "")
		rc := rest.CopyConfig(env.Config)
		rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
				if block.Load() && (r.Method == http.MethodPut || r.Method == http.MethodPatch) && strings.HasSuffix(r.URL.Path, "/leases/lock") {
					<-r.Context().Done()
					return nil, r.Context().Err()
				}
				return rt.RoundTrip(r)
			})
		})
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		cfgB.Client = cs
		b := p.add("b", cfgB, nil)
		a.run()
		p.mustStart(t, 20*time.Second, "a")
		b.run()
		time.Sleep(700 * time.Millisecond)
		deleteLease(t, ns)
		eventually(t, 2500*time.Millisecond, "b to create the Lease while a cleans up", func() bool { return r25Holder(t, ns, "lock") == "b" })
		block.Store(true)
		eventually(t, time.Second, "b to wait in takeLeadership", func() bool { return len(r25Waiters()) > 0 })
		eventually(t, 3*time.Second, "b's waiting goroutine to leave takeLeadership once its term ended", func() bool { return len(r25Waiters()) == 0 })
		p.mu.Lock()
		stillCleaning := p.inFlight["a"] > 0
		p.mu.Unlock()
		t.Logf("b's term ended while waiting (a still cleaning up: %v); renew_deadline losses %v", stillCleaning, r25Lost(p.reg, ns+"/lock", "renew_deadline"))
		block.Store(false)
		p.waitLeading(t, 12*time.Second, "after b's term ended while waiting")
		p.finish(t)
	})
	t.Run("loop stalls past the safe-work deadline", func(t *testing.T) {
		ns := env.Namespace(t)
		p := newR25Proc(t, ns)
		cfgA := shortConfig(t, ns, "lock", "")
		cfgA.ReleaseTimeout = 8 * time.Second
		a := p.add("a", cfgA, func() time.Duration { return 4 * time.Second })
		cfgB := shortConfig(t, ns, "lock", "")
		var stalled atomic.Bool
		cfgB.OnNewLeader = func(identity string, _ int64) {
			if identity == "b" && stalled.CompareAndSwap(false, true) {
				time.Sleep(2600 * time.Millisecond) // the loop is stalled: no renewal; the safe-work deadline (1.78s) passes
			}
		}
		b := p.add("b", cfgB, nil)
		a.run()
		p.mustStart(t, 20*time.Second, "a")
		b.run()
		time.Sleep(700 * time.Millisecond)
		deleteLease(t, ns)
		eventually(t, 2500*time.Millisecond, "b to create the Lease while a cleans up", func() bool { return r25Holder(t, ns, "lock") == "b" })
		eventually(t, time.Second, "b to wait in takeLeadership", func() bool { return len(r25Waiters()) > 0 })
		eventually(t, 3*time.Second, "b's waiting goroutine to leave takeLeadership at the safe-work deadline", func() bool { return len(r25Waiters()) == 0 })
		eventually(t, 5*time.Second, "b to count the loss as deadline_passed", func() bool { return r25Lost(p.reg, ns+"/lock", "deadline_passed") >= 1 })
		p.waitLeading(t, 12*time.Second, "after b's term ended at its safe-work deadline while waiting")
		p.finish(t)
	})
}

// ---------------------------------------------------------------------------------------------------------
// 5. The same elector re-acquires after a deletion.

func TestRound25SameElectorReacquires(t *testing.T) {
	t.Run("cleanup within ReleaseTimeout", func(t *testing.T) {
		ns := env.Namespace(t)
		p := newR25Proc(t, ns)
		a := p.add("a", shortConfig(t, ns, "lock", ""), func() time.Duration { return 700 * time.Millisecond })
		a.run()
		tok := p.mustStart(t, 20*time.Second, "a")
		for i := range 3 {
			time.Sleep(300 * time.Millisecond)
			deleted := time.Now()
			deleteLease(t, ns)
			next := p.mustStart(t, 6*time.Second, fmt.Sprintf("a after deletion %d", i))
			if next.Epoch <= tok.Epoch {
				t.Errorf("epoch %d after %d", next.Epoch, tok.Epoch)
			}
			t.Logf("deletion %d: a leads epoch %d after %v", i, next.Epoch, time.Since(deleted).Round(time.Millisecond))
			tok = next
		}
		p.finish(t)
	})
	t.Run("callback ignores its context past ReleaseTimeout", func(t *testing.T) {
		ns := env.Namespace(t)
		p := newR25Proc(t, ns)
		p.allowSelf = true
		cfg := shortConfig(t, ns, "lock", "")
		cfg.ReleaseTimeout = 300 * time.Millisecond
		a := p.add("a", cfg, func() time.Duration { return 1500 * time.Millisecond })
		a.run()
		p.mustStart(t, 20*time.Second, "a")
		for i := range 2 {
			time.Sleep(300 * time.Millisecond)
			deleted := time.Now()
			deleteLease(t, ns)
			next := p.mustStart(t, 6*time.Second, fmt.Sprintf("a after deletion %d", i))
			t.Logf("deletion %d: a leads epoch %d after %v", i, next.Epoch, time.Since(deleted).Round(time.Millisecond))
		}
		p.finish(t)
	})
}

// ---------------------------------------------------------------------------------------------------------
// 6. Graceful handover stays immediate.

func TestRound25GracefulHandoverStaysImmediate(t *testing.T) {
	ns := env.Namespace(t)
	p := newR25Proc(t, ns)
	const cleanup = 400 * time.Millisecond
	x := map[string]*r25elector{
		"a": p.add("a", shortConfig(t, ns, "lock", ""), func() time.Duration { return cleanup }),
		"b": p.add("b", shortConfig(t, ns, "lock", ""), func() time.Duration { return cleanup }),
	}
	x["a"].run()
	holder := p.mustStart(t, 20*time.Second, "a").Holder
	x["b"].run()
	for i := range 3 {
		time.Sleep(800 * time.Millisecond) // the standby has seen the holder's renewals
		other := map[string]string{"a": "b", "b": "a"}[holder]
		cancelled := time.Now()
		go x[holder].stop(15 * time.Second)
		tok := p.mustStart(t, 3*time.Second, fmt.Sprintf("handover %d", i))
		d := time.Since(cancelled)
		if tok.Holder != other {
			t.Errorf("handover %d: %s leads, want %s", i, tok.Holder, other)
		}
		// The old holder's cleanup takes 400 ms; an expiry takeover would take at least the 2 s lease.
		if d > cleanup+time.Second {
			t.Errorf("handover %d: %s started leading %v after %s's Run was cancelled (cleanup %v): not immediate", i, tok.Holder, d, holder, cleanup)
		}
		if d < cleanup {
			t.Errorf("handover %d: %s started leading %v after %s's Run was cancelled, before its %v cleanup could end", i, tok.Holder, d, holder, cleanup)
		}
		t.Logf("handover %d: %s -> %s in %v", i, holder, tok.Holder, d.Round(time.Millisecond))
		eventually(t, 15*time.Second, holder+"'s Run to return", func() bool { return !x[holder].running() })
		x[holder].run()
		holder = tok.Holder
	}
	p.finish(t)
}

// ---------------------------------------------------------------------------------------------------------
// 7. Chaos.

type coordinationLease = coordinationv1.Lease

func TestRound25Chaos(t *testing.T) {
	ns := env.Namespace(t)
	p := newR25Proc(t, ns)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 25))
	var rmu sync.Mutex
	cleanup := func() time.Duration {
		rmu.Lock()
		defer rmu.Unlock()
		return time.Duration(rng.IntN(500)) * time.Millisecond
	}
	ids := []string{"a", "b", "c"}
	xs := map[string]*r25elector{}
	var postCalls, postFailures atomic.Int32
	for _, id := range ids {
		cfg := shortConfig(t, ns, "lock", "")
		if id == "c" {
			// c's PostAcquire fails one time in three (an error, or a hang until PostAcquireTimeout).
			cfg.PostAcquireTimeout = 700 * time.Millisecond
			cfg.PostAcquire = elector.AcquireHook(func(ctx context.Context, _ elector.Token) error {
				postCalls.Add(1)
				rmu.Lock()
				k := rng.IntN(6)
				rmu.Unlock()
				switch k {
				case 0:
					postFailures.Add(1)
					return errors.New("injected PostAcquire failure")
				case 1:
					postFailures.Add(1)
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			})
		}
		xs[id] = p.add(id, cfg, cleanup)
		xs[id].run()
	}
	p.waitLeading(t, 20*time.Second, "the first leader")
	var restarts sync.WaitGroup
	counts := map[string]int{}
	end := time.Now().Add(20 * time.Second)
	for n := 1; time.Now().Before(end); n++ {
		rmu.Lock()
		action := rng.IntN(5)
		id := ids[rng.IntN(len(ids))]
		pause := time.Duration(150+rng.IntN(700)) * time.Millisecond
		restartAfter := time.Duration(rng.IntN(1200)) * time.Millisecond
		rmu.Unlock()
		switch action {
		case 0, 1:
			counts["delete"]++
			r25DeleteIfPresent(t, ns)
		case 2:
			counts["forged release"]++
			r25Edit(t, ns, func(l *coordinationLease) { l.Spec.HolderIdentity = nil })
		case 3:
			counts["forged holder"]++
			r25Edit(t, ns, func(l *coordinationLease) { l.Spec.HolderIdentity = &id })
		case 4:
			x := xs[id]
			if !x.running() {
				break
			}
			counts["Run cancelled"]++
			restarts.Go(func() {
				if took := x.stop(15 * time.Second); took > 8*time.Second {
					t.Errorf("Run(%s) took %v to return", x.id, took)
				}
				time.Sleep(restartAfter)
				x.run()
			})
		}
		time.Sleep(pause)
		if n%6 == 0 {
			restarts.Wait()
			p.waitLeading(t, 10*time.Second, fmt.Sprintf("after %d perturbations %v", n, counts))
		}
	}
	restarts.Wait()
	p.waitLeading(t, 10*time.Second, fmt.Sprintf("after the last perturbation %v", counts))
	p.mu.Lock()
	t.Logf("perturbations %v; leaderships started %v; c's PostAcquire ran %d times, failed %d", counts, p.started, postCalls.Load(), postFailures.Load())
	p.mu.Unlock()
	p.finish(t)
}
