package electorbench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencekit/fencekit/test/util/kubeconfig"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var results struct {
	mu   sync.Mutex
	rows []string
}

func report(b *testing.B, value float64, unit, row string) {
	b.ReportMetric(value, unit)
	results.mu.Lock()
	results.rows = append(results.rows, fmt.Sprintf("%-58s %12.2f %s", row, value, unit))
	results.mu.Unlock()
}

// BenchmarkRequestRates: 1 leader + 4 standbys per implementation, defaults 15/10/2 s, both
// implementations at the same time on two Leases; requests counted over a window after everyone observed
// the leader. Meanwhile, crash failover rounds run on two other Leases.
func BenchmarkRequestRatesAndCrashFailover(b *testing.B) {
	window := envDuration("FENCEKIT_BENCH_WINDOW", 60*time.Second)
	var wg sync.WaitGroup
	for _, im := range []impl{fencekit, clientGo} {
		wg.Go(func() { requestRates(b, im, window) })
		wg.Go(func() { crashFailover(b, im, envInt("FENCEKIT_BENCH_FAILOVER_ROUNDS", 3)) })
	}
	wg.Wait()
}

func requestRates(b *testing.B, im impl, window time.Duration) {
	g := newGroup(b, im, "rates")
	defer g.stopAll()
	for range 5 {
		g.add(b, true)
	}
	leader := g.waitStart(b)
	g.waitObserved(b, leader.id)
	time.Sleep(3 * time.Second) // past the acquisition and its Event
	before := map[string]snapshot{}
	for id, c := range g.members {
		before[id] = c.counts.snap()
	}
	time.Sleep(window)
	perMin := func(a, z int64) float64 { return float64(z-a) / window.Minutes() }
	var maxStandby, maxStandbyWatch float64
	for id, c := range g.members {
		after := c.counts.snap()
		other := perMin(before[id].other, after.other) + perMin(before[id].events, after.events)
		watch := perMin(before[id].watch, after.watch)
		if id == leader.id {
			report(b, other, im.name+"-leader-req/min", im.name+": leader, requests/min outside the watch")
			report(b, watch, im.name+"-leader-watch/min", im.name+": leader, watch requests/min")
			continue
		}
		maxStandby = max(maxStandby, other)
		maxStandbyWatch = max(maxStandbyWatch, watch)
	}
	report(b, maxStandby, im.name+"-standby-req/min", im.name+": busiest of 4 standbys, requests/min outside the watch")
	report(b, maxStandbyWatch, im.name+"-standby-watch/min", im.name+": busiest of 4 standbys, watch requests/min")
}

// crashFailover: the holder stops renewing without releasing; time from the reply to its last successful
// renewal to the new leader's OnStartedLeading. Defaults 15/10/2 s, 2 candidates.
func crashFailover(b *testing.B, im impl, rounds int) {
	ds := takeovers(b, im, "failover", false, rounds, func(g *group, leader string) time.Time {
		time.Sleep(2500 * time.Millisecond) // let a renewal or two happen
		c := g.members[leader]
		g.remove(leader) // a crash: ReleaseOnCancel is off
		return time.Unix(0, c.counts.lastRenewOK.Load())
	})
	report(b, float64(percentile(ds, 0.5).Milliseconds()), im.name+"-failover-p50-ms", im.name+": crash failover after the last renewal, p50 (ms)")
	report(b, float64(percentile(ds, 1).Milliseconds()), im.name+"-failover-max-ms", fmt.Sprintf("%s: crash failover, max of %d (ms)", im.name, rounds))
}

// BenchmarkGracefulHandover: the leader releases (Run's context cancelled, ReleaseOnCancel on); time from
// the cancel to the standby's OnStartedLeading. Defaults 15/10/2 s, 2 candidates.
func BenchmarkGracefulHandover(b *testing.B) {
	rounds := envInt("FENCEKIT_BENCH_ROUNDS", 10)
	for _, im := range []impl{fencekit, clientGo} {
		ds := takeovers(b, im, "handover", true, rounds, func(g *group, leader string) time.Time {
			t0 := time.Now()
			g.members[leader].cancel()
			return t0
		})
		report(b, float64(percentile(ds, 0.5).Microseconds())/1000, im.name+"-handover-p50-ms", im.name+": graceful handover p50 (ms)")
		report(b, float64(percentile(ds, 0.99).Microseconds())/1000, im.name+"-handover-p99-ms", fmt.Sprintf("%s: graceful handover p99 of %d (ms)", im.name, rounds))
	}
}

// takeovers measures rounds of one takeover in a group of two candidates of im on lease (ReleaseOnCancel
// as release): once both observe the leader, end stops it and returns the instant the measured time starts
// from, which runs until the other candidate's OnStartedLeading. A new candidate replaces the former leader
// after each round. The group is stopped when it returns.
func takeovers(b *testing.B, im impl, lease string, release bool, rounds int, end func(g *group, leader string) time.Time) []time.Duration {
	g := newGroup(b, im, lease)
	defer g.stopAll()
	g.add(b, release)
	g.add(b, release)
	leader := g.waitStart(b)
	ds := make([]time.Duration, 0, rounds)
	for range rounds {
		g.waitObserved(b, leader.id)
		t0 := end(g, leader.id)
		next := g.waitStart(b)
		ds = append(ds, next.at.Sub(t0))
		if _, ok := g.members[leader.id]; ok {
			g.remove(leader.id)
		}
		g.add(b, release)
		leader = next
	}
	return ds
}

// BenchmarkHundredLeases: sharded ownership of 100 Leases by two replicas, each a separate process
// (test/bench/elector/hundred) running 100 electors on one shared client: replica A starts first and leads
// all 100 Leases, replica B stands by for all 100. Each reports its VmRSS and its request rate at the
// defaults (15/10/2 s). fencekit's pair and client-go's pair run at the same time, in two namespaces.
func BenchmarkHundredLeases(b *testing.B) {
	window := envDuration("FENCEKIT_BENCH_WINDOW", 60*time.Second)
	dir := b.TempDir()
	bin := filepath.Join(dir, "hundred")
	build := exec.Command("go", "build", "-o", bin, "./test/bench/elector/hundred")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("building the replica: %v\n%s", err, out)
	}
	kc := kubeconfig.ForTest(b, env.Config)
	var wg sync.WaitGroup
	for _, im := range []string{"fencekit", "client-go"} {
		ns := env.Namespace(b)
		wg.Go(func() { hundredLeases(b, bin, kc, im, ns, window) })
	}
	wg.Wait()
	results.mu.Lock()
	b.Logf("all results:\n%s", strings.Join(results.rows, "\n"))
	results.mu.Unlock()
}

func hundredLeases(b *testing.B, bin, kubeconfig, im, ns string, window time.Duration) {
	replica := func(prefix string, lead bool) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
		cmd := exec.Command(bin, "-impl", im, "-kubeconfig", kubeconfig, "-namespace", ns, "-identity", prefix,
			"-n", "100", "-lead="+strconv.FormatBool(lead), "-window", window.String())
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Error(err)
			return nil, nil, nil
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Error(err)
			return nil, nil, nil
		}
		if err := cmd.Start(); err != nil {
			b.Error(err)
			return nil, nil, nil
		}
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			b.Errorf("%s replica %s did not get ready: %q", im, prefix, sc.Text())
		}
		return cmd, stdin, sc
	}
	result := func(sc *bufio.Scanner) hundredResult {
		var r hundredResult
		if sc == nil || !sc.Scan() {
			b.Errorf("no result from a %s replica", im)
			return r
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			b.Error(err)
		}
		return r
	}
	aCmd, aIn, aOut := replica(im+"-a", true)
	bCmd, bIn, bOut := replica(im+"-b", false)
	ra, rb := result(aOut), result(bOut)
	for _, in := range []io.WriteCloser{aIn, bIn} {
		if in != nil {
			_ = in.Close()
		}
	}
	for _, cmd := range []*exec.Cmd{aCmd, bCmd} {
		if cmd != nil {
			_ = cmd.Wait()
		}
	}
	report(b, ra.RSSMiB, im+"-leading-replica-rss-MiB", fmt.Sprintf("%s: replica leading %d/100 Leases, VmRSS (MiB)", im, ra.Leading))
	report(b, ra.RequestsMin, im+"-leading-replica-req/min", im+": replica leading 100 Leases, requests/min outside the watch")
	report(b, ra.WatchesMin, im+"-leading-replica-watch/min", im+": replica leading 100 Leases, watch requests/min")
	report(b, rb.RSSMiB, im+"-standby-replica-rss-MiB", fmt.Sprintf("%s: replica standing by for 100 Leases (leading %d), VmRSS (MiB)", im, rb.Leading))
	report(b, rb.RequestsMin, im+"-standby-replica-req/min", im+": replica standing by for 100 Leases, requests/min outside the watch")
	report(b, rb.WatchesMin, im+"-standby-replica-watch/min", im+": replica standing by for 100 Leases, watch requests/min")
}

// hundredResult mirrors the JSON line of test/bench/elector/hundred.
type hundredResult struct {
	Leading     int     `json:"leading"`
	RSSMiB      float64 `json:"rssMiB"`
	RequestsMin float64 `json:"requestsPerMin"`
	WatchesMin  float64 `json:"watchRequestsPerMin"`
}
