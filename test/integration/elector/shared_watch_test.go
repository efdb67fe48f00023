package elector_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// leaseRequests counts a client's requests on Leases by kind.
type leaseRequests struct{ lists, watches, writes, other atomic.Int64 }

func (c *leaseRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		switch {
		case !strings.Contains(r.URL.Path, "/leases"):
			c.other.Add(1)
		case r.Method != http.MethodGet:
			c.writes.Add(1)
		case r.URL.Query().Get("watch") == "true":
			c.watches.Add(1)
		default:
			c.lists.Add(1)
		}
		return rt.RoundTrip(r)
	})
}

func (c *leaseRequests) String() string {
	return fmt.Sprintf("%d lists, %d watches, %d writes of Leases, %d other requests", c.lists.Load(), c.watches.Load(), c.writes.Load(), c.other.Load())
}

// replicaOf runs one elector per Lease shard-0 .. shard-(n-1) of ns on cs, as one replica of a sharded
// controller, at the default timings. It returns the number leading now and a stop that releases them.
func replicaOf(t *testing.T, cs kubernetes.Interface, ns, identity string, n int) (leading func() int, stop func()) {
	t.Helper()
	var count atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range n {
		e, err := elector.New(elector.Config{Client: cs, Namespace: ns, Name: fmt.Sprintf("shard-%d", i), Identity: identity,
			OnStartedLeading: func(ctx context.Context, _ elector.Token) {
				count.Add(1)
				<-ctx.Done()
				count.Add(-1)
			}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = e.Run(ctx) })
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return func() int { return int(count.Load()) }, stop
}

// shardClient is a client as user, bound to the fencekit-elector role in ns, that counts its requests in
// reqs and allows the requests of 30 electors (client-go's default 5 a second does not: 15 renewals a
// second).
func shardClient(t *testing.T, ns, user string, reqs *leaseRequests) kubernetes.Interface {
	t.Helper()
	_, cfg := env.ElectorClient(t, ns, user)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Wrap(reqs.wrap)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// The electors of one process that share a client share one watch of their Leases' namespace: 30 Leases
// led through one client and stood by for through another take one List and one watch per client, the
// standby replica sends nothing else on Leases, and it still takes every Lease over as soon as the leader
// releases them (its watch shows the release; a poll would wait RetryPeriod).
func TestElectorsOfOneClientShareOneWatch(t *testing.T) {
	const n = 30
	ns := env.Namespace(t)
	var leaderReqs, standbyReqs leaseRequests
	leaderCS := shardClient(t, ns, "shard-leader", &leaderReqs)
	standbyCS := shardClient(t, ns, "shard-standby", &standbyReqs)
	leaderLeading, stopLeader := replicaOf(t, leaderCS, ns, "leader", n)
	eventually(t, testenv.EventuallyTimeout, fmt.Sprintf("the leader replica to lead all %d Leases", n), func() bool { return leaderLeading() == n })
	standbyLeading, _ := replicaOf(t, standbyCS, ns, "standby", n)
	// Two retry periods of standing by: a polling standby would have read each Lease twice by now.
	time.Sleep(2 * elector.DefaultRetryPeriod)
	if standbyLeading() != 0 {
		t.Fatalf("the standby replica leads %d Leases while the leader renews them all", standbyLeading())
	}
	if got := standbyReqs.lists.Load() + standbyReqs.watches.Load() + standbyReqs.writes.Load(); got != 2 {
		t.Errorf("the standby replica of %d electors sent %s; want 1 list and 1 watch of Leases, nothing else", n, &standbyReqs)
	}

	released := time.Now()
	stopLeader()
	eventually(t, testenv.EventuallyTimeout, fmt.Sprintf("the standby replica to lead all %d Leases", n), func() bool { return standbyLeading() == n })
	// Well under one lease duration (15 s): the standbys acted on the watched release, not on expiry.
	if took := time.Since(released); took >= elector.DefaultLeaseDuration {
		t.Errorf("the standby replica took %v to lead every released Lease, not less than the lease duration %v", took, elector.DefaultLeaseDuration)
	}
	// The leader replica created the Leases: each of its electors first listed one Lease to seed the epoch.
	if leaderReqs.lists.Load() != n+1 || leaderReqs.watches.Load() != 1 {
		t.Errorf("the leader replica of %d electors sent %s; want %d lists (1 per elector, to seed its epoch, and the watch's) and 1 watch of Leases", n, &leaderReqs, n+1)
	}
	if standbyReqs.lists.Load() != 1 || standbyReqs.watches.Load() != 1 {
		t.Errorf("the standby replica of %d electors sent %s; want 1 list and 1 watch of Leases", n, &standbyReqs)
	}
}

// A client whose RBAC names its Leases (resourceNames) may not list the namespace's Leases: each of its
// electors watches its own Lease by name, which RBAC allows, and a standby still takes over on the
// leader's release. (An elector lists the namespace's Leases to seed the epoch of a Lease that does not
// exist yet, so such a client needs its Leases created beforehand.)
func TestElectorsWithRBACOnTheirLeasesByName(t *testing.T) {
	ns := env.Namespace(t)
	names := []string{"shard-0", "shard-1"}
	for _, name := range names {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{protocol.FencedLabel: "true"}, Annotations: map[string]string{protocol.EpochAnnotation: "1"}}}
		if _, err := clientset(t).CoordinationV1().Leases(ns).Create(t.Context(), lease, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Lease %s/%s: %v", ns, name, err)
		}
	}
	for _, user := range []string{"named-leader", "named-standby"} {
		env.Grant(t, ns, user, []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: names,
				Verbs: []string{"get", "list", "watch", "update", "patch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}, user)
	}
	clientOf := func(user string, reqs *leaseRequests) kubernetes.Interface {
		_, cfg, err := env.UserClient(user)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Wrap(reqs.wrap)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	var leaderReqs, standbyReqs leaseRequests
	leaderLeading, stopLeader := replicaOf(t, clientOf("named-leader", &leaderReqs), ns, "leader", len(names))
	eventually(t, testenv.EventuallyTimeout, "the leader replica to lead both Leases", func() bool { return leaderLeading() == len(names) })
	standbyLeading, _ := replicaOf(t, clientOf("named-standby", &standbyReqs), ns, "standby", len(names))
	eventually(t, testenv.EventuallyTimeout, "the standby replica's watches by name", func() bool { return standbyReqs.watches.Load() >= int64(len(names)) })
	released := time.Now()
	stopLeader()
	eventually(t, testenv.EventuallyTimeout, "the standby replica to lead both Leases", func() bool { return standbyLeading() == len(names) })
	if took := time.Since(released); took >= elector.DefaultLeaseDuration {
		t.Errorf("the standby replica took %v to lead the released Leases, not less than the lease duration %v", took, elector.DefaultLeaseDuration)
	}
}
