package elector_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

// The control plane carries fencekit's Lease policy: the tests' admin client is exempt from it (break
// glass), electorClientset's users are held to it.
func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithLeasePolicy()) }

// Short durations for the integration tests: 2s lease, 1.5s renew deadline, 0.3s retry, 0.2s margin
// (safe-work window 2s*0.99-0.2s = 1.78s).
func shortConfig(t testing.TB, ns, name, identity string) elector.Config {
	t.Helper()
	return elector.Config{
		Client:        clientset(t),
		Namespace:     ns,
		Name:          name,
		Identity:      identity,
		LeaseDuration: 2 * time.Second,
		RenewDeadline: 1500 * time.Millisecond,
		RetryPeriod:   300 * time.Millisecond,
		SafetyMargin:  200 * time.Millisecond,
	}
}

// electorClientset is a client authenticated as user, bound to the fencekit-elector role in ns: neither
// an admin nor break glass, so fencekit's Lease policy applies to its writes. wrap, if given, wraps its
// transport: a test sees, delays or fails its requests there.
func electorClientset(t testing.TB, ns, user string, wrap ...func(http.RoundTripper) http.RoundTripper) kubernetes.Interface {
	t.Helper()
	_, cfg := env.ElectorClient(t, ns, user)
	for _, w := range wrap {
		cfg.Wrap(w)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// history records leaderships across electors: who held which epoch, and whether two ever overlapped.
type history struct {
	mu       sync.Mutex
	byEpoch  map[int64]string
	order    []int64
	leading  map[string]bool
	overlaps int
	started  chan elector.Token
}

func newHistory() *history {
	return &history{byEpoch: map[int64]string{}, leading: map[string]bool{}, started: make(chan elector.Token, 100)}
}

// parallelLock runs t in parallel with the package's other parallel tests, in a namespace of its own, and
// returns that namespace and a history for the leaderships of its Lease "lock".
func parallelLock(t *testing.T) (string, *history) {
	t.Parallel()
	return env.Namespace(t), newHistory()
}

// config is shortConfig for identity on the Lease "lock" of ns, with the admin client, recording its
// leaderships in h.
func (h *history) config(t testing.TB, ns, identity string) elector.Config {
	t.Helper()
	cfg := shortConfig(t, ns, "lock", identity)
	cfg.OnStartedLeading = h.lead
	return cfg
}

// policyConfig is h.config with the client of the user identity+"-user" (electorClientset), held to
// fencekit's Lease policy.
func (h *history) policyConfig(t testing.TB, ns, identity string) elector.Config {
	t.Helper()
	cfg := h.config(t, ns, identity)
	cfg.Client = electorClientset(t, ns, identity+"-user")
	return cfg
}

// lead is an OnStartedLeading that records the leadership until its context ends.
func (h *history) lead(ctx context.Context, tok elector.Token) {
	h.mu.Lock()
	if prev, ok := h.byEpoch[tok.Epoch]; ok {
		h.overlaps++ // an epoch handed out twice counts as an overlap too
		_ = prev
	}
	h.byEpoch[tok.Epoch] = tok.Holder
	h.order = append(h.order, tok.Epoch)
	for id, on := range h.leading {
		if on && id != tok.Holder {
			h.overlaps++
		}
	}
	h.leading[tok.Holder] = true
	h.mu.Unlock()
	h.started <- tok
	<-ctx.Done()
	h.mu.Lock()
	h.leading[tok.Holder] = false
	h.mu.Unlock()
}

func (h *history) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.overlaps != 0 {
		t.Errorf("%d overlapping leaderships", h.overlaps)
	}
	for i := 1; i < len(h.order); i++ {
		if h.order[i] <= h.order[i-1] {
			t.Errorf("epochs not strictly increasing in order of acquisition: %v", h.order)
		}
	}
}

func (h *history) wait(t *testing.T, within time.Duration) elector.Token {
	t.Helper()
	select {
	case tok := <-h.started:
		return tok
	case <-time.After(within):
		t.Fatalf("no leader within %v", within)
		return elector.Token{}
	}
}

// candidate is a running elector.
type candidate struct {
	e      *elector.Elector
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *candidate) stop() { c.cancel(); <-c.done }

var registries atomic.Int64

func start(t *testing.T, cfg elector.Config, opts ...elector.Option) *candidate {
	t.Helper()
	registries.Add(1)
	opts = append([]elector.Option{elector.WithMetricsRegisterer(prometheus.NewRegistry())}, opts...)
	e, err := elector.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{e: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := e.Run(ctx); err != nil {
			t.Errorf("Run(%s): %v", cfg.Identity, err)
		}
	}()
	t.Cleanup(c.stop)
	return c
}

// deleteLease deletes the Lease "lock" of ns as an admin.
func deleteLease(t *testing.T, ns string) {
	t.Helper()
	if err := clientset(t).CoordinationV1().Leases(ns).Delete(t.Context(), "lock", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting Lease %s/lock: %v", ns, err)
	}
}

func getLease(t *testing.T, ns, name string) *coordinationv1.Lease {
	t.Helper()
	l, err := clientset(t).CoordinationV1().Leases(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func boolPtr(b bool) *bool { return &b }

// eventually waits until cond holds, for at most within (testenv's poller).
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyWithin(t, within, what, func() (bool, string) { return cond(), "" })
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func getLeaseTemplate(ns string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lock"}}
}
