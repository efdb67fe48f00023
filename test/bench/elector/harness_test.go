package electorbench

import (
	"context"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard()) // both electors log through klog; keep the benchmark output readable
	testenv.Main(m, &env)
}

// counts are one client's requests, told apart by kind.
type counts struct {
	watch, other, events atomic.Int64
	lastRenewOK          atomic.Int64 // unix nanoseconds of the reply to the last successful Lease update
}

type snapshot struct{ watch, other, events int64 }

func (c *counts) snap() snapshot {
	return snapshot{c.watch.Load(), c.other.Load(), c.events.Load()}
}

// client returns a clientset whose requests are counted in c.
func client(tb testing.TB, c *counts, qps float32) kubernetes.Interface {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = qps, int(2*qps)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch {
			case r.URL.Query().Get("watch") == "true":
				c.watch.Add(1)
			case strings.Contains(r.URL.Path, "/events"):
				c.events.Add(1)
			default:
				c.other.Add(1)
			}
			resp, err := rt.RoundTrip(r)
			if err == nil && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/leases/") && resp.StatusCode < 300 {
				c.lastRenewOK.Store(time.Now().UnixNano())
			}
			return resp, err
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return cs
}

// started is a leadership start seen by the benchmark.
type started struct {
	id string
	at time.Time
}

// candidate is one running elector of either kind.
type candidate struct {
	id     string
	counts *counts
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *candidate) stop() { c.cancel(); <-c.done }

// impl starts an elector of one kind on a Lease.
type impl struct {
	name  string
	start func(tb testing.TB, cs kubernetes.Interface, ns, lease, id string, release bool, onStart func(started), onNewLeader func(string)) (context.CancelFunc, chan struct{})
}

var fencekit = impl{name: "fencekit", start: func(tb testing.TB, cs kubernetes.Interface, ns, lease, id string, release bool, onStart func(started), onNewLeader func(string)) (context.CancelFunc, chan struct{}) {
	e, err := elector.New(elector.Config{
		Client: cs, Namespace: ns, Name: lease, Identity: id, ReleaseOnCancel: &release,
		OnStartedLeading: func(ctx context.Context, _ elector.Token) {
			onStart(started{id: id, at: time.Now()})
			<-ctx.Done()
		},
		OnNewLeader: func(h string, _ int64) { onNewLeader(h) },
	}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	return cancel, done
}}

var clientGo = impl{name: "client-go", start: func(tb testing.TB, cs kubernetes.Interface, ns, lease, id string, release bool, onStart func(started), onNewLeader func(string)) (context.CancelFunc, chan struct{}) {
	le, err := NewClientGoElector(cs, ns, lease, id, release, leaderelection.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			onStart(started{id: id, at: time.Now()})
			<-ctx.Done()
		},
		OnStoppedLeading: func() {},
		OnNewLeader:      onNewLeader,
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); le.Run(ctx) }()
	return cancel, done
}}

// group is a set of candidates of one kind on one Lease.
type group struct {
	impl    impl
	ns      string
	lease   string
	starts  chan started
	mu      sync.Mutex
	sees    map[string]string // candidate id -> the leader it last observed
	members map[string]*candidate
	next    int
}

func newGroup(tb testing.TB, im impl, lease string) *group {
	return &group{impl: im, ns: env.Namespace(tb), lease: lease, starts: make(chan started, 100),
		sees: map[string]string{}, members: map[string]*candidate{}}
}

func (g *group) add(tb testing.TB, release bool) *candidate {
	id := g.impl.name + "-" + strconv.Itoa(g.next)
	g.next++
	c := &candidate{id: id, counts: &counts{}}
	cs := client(tb, c.counts, 5) // client-go's default rate limit
	c.cancel, c.done = g.impl.start(tb, cs, g.ns, g.lease, id, release,
		func(s started) { g.starts <- s },
		func(leader string) { g.mu.Lock(); g.sees[id] = leader; g.mu.Unlock() })
	g.members[id] = c
	return c
}

func (g *group) remove(id string) {
	g.members[id].stop()
	delete(g.members, id)
	g.mu.Lock()
	delete(g.sees, id)
	g.mu.Unlock()
}

// waitObserved waits until every member observed leader.
func (g *group) waitObserved(tb testing.TB, leader string) {
	tb.Helper()
	testenv.EventuallyWithin(tb, 60*time.Second, g.impl.name+": members all observe leader "+leader, func() (bool, string) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for id := range g.members {
			if g.sees[id] != leader {
				return false, id + " sees " + g.sees[id]
			}
		}
		return true, ""
	})
}

func (g *group) waitStart(tb testing.TB) started {
	select {
	case s := <-g.starts:
		return s
	case <-time.After(120 * time.Second):
		tb.Fatalf("%s: no leader", g.impl.name)
		return started{}
	}
}

func (g *group) stopAll() {
	for id := range g.members {
		g.remove(id)
	}
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// percentile is the nearest-rank percentile p (0 < p <= 1) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
