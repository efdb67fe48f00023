package fencing_test

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var (
	costWindow      = flag.Duration("cost.window", 30*time.Second, "BenchmarkControlPlaneCost: the measuring window of each point")
	costLeases      = flag.String("cost.leases", "100,1000", "BenchmarkControlPlaneCost: the Lease counts of the Lease points (10000 does not fit a 2-core machine: docs/benchmarks.md)")
	costFRs         = flag.String("cost.fencedresources", "100,1000,10000", "BenchmarkControlPlaneCost: the FencedResource counts of the resource points")
	costQPS         = flag.Int("cost.qps", 2000, "BenchmarkControlPlaneCost: each replica's client-side rate limit, at least twice its Leases (four times their renewal rate: 1,000 Leases renew 500 times a second)")
	costMemProfiles = flag.String("cost.memprofiles", "", "BenchmarkControlPlaneCost: a directory for a heap profile of each Lease point's replicas (test/bench/elector/hundred -memprofile)")
	costReplicas    = flag.String("cost.replicas", "2,3", "BenchmarkControlPlaneCost: the replica counts of the Lease points")
	costRepeats     = flag.Int("cost.repeats", 3, "BenchmarkControlPlaneCost: how often the Lease points run, one round of every point after the other (test/bench/record keeps each figure's median, and every run)")
	costLimited     = flag.Int("cost.limited", 1000, "BenchmarkControlPlaneCost: the Lease count of the point whose replicas' clients are limited to exactly their renewal rate (0: none)")
)

// BenchmarkControlPlaneCost is the scale sweep: what fencekit costs the control plane. Each point
// runs for -cost.window on the envtest control plane with the operator (cmd/manager) running as its own
// process, and reports the kube-apiserver's and etcd's CPU use (CPU seconds per second of the window, from
// /proc/<pid>/stat) and resident memory at its end, the apiserver's requests per second (its
// apiserver_request_total, watches excluded) and the watches it has open (apiserver_longrunning_requests,
// verb WATCH), and the operator's resident memory.
//
// Points, one after the other, each on a control plane of its own (started for the point and stopped
// after it, so that no earlier point's objects, watch cache or heap are in its figures):
//   - idle: nothing but the operator, the baseline every other point is read against;
//   - leases=L/replicas=R/impl=I: R replicas, each a process running L electors on Leases shard-0 ..
//     shard-<L-1> (test/bench/elector/hundred), the first leading every Lease and the others standing by,
//     at the default timings (15 s / 10 s / 2 s), with fencekit's elector (impl=fencekit) and with client-go's
//     leaderelection (impl=client-go), which a user would otherwise run; each replica's own memory and
//     request rate are reported too, and the Leases led at the end and the leaderships lost during the
//     window (a replica whose renewals cannot keep up loses Leases; after 3 minutes without every
//     Lease led the point is measured as it is); each replica's client allows -cost.qps requests a
//     second or four times its Leases' renewal rate, whichever is more;
//   - leases=L/replicas=2/impl=I/qps=Q: L = -cost.limited, each replica's client limited to exactly the
//     renewal rate of its Leases (Q = L/2 a second): what the replica's own queue does to its renewals;
//   - fencedresources=N: N FencedResources bound to 100 Leases held by one replica; the window starts
//     once the operator has written every resource's status.
//
// A replica's memory and the apiserver's move several MiB from run to run of one point (the moment of the
// last garbage collection, the watch cache's growth), as much as fencekit's and client-go's differ: the
// Lease points run -cost.repeats rounds, each round every point in turn, so that fencekit's and client-go's
// runs alternate, and go test names the later runs "#01", "#02" (test/bench/record keeps the median).
func BenchmarkControlPlaneCost(b *testing.B) {
	elector := buildCommand(b, "./test/bench/elector/hundred")
	b.Run("idle", func(b *testing.B) {
		p := startCostPoint(b)
		p.measure(*costWindow).report()
	})
	for _, n := range counts(b, *costFRs) {
		b.Run(fmt.Sprintf("fencedresources=%d", n), func(b *testing.B) {
			const leases = 100
			p := startCostPoint(b)
			ns := p.env.Namespace(b)
			holder := startElectors(b, elector, p.kubeconfig, ns, "fencekit", "r0", leases, true, *costQPS)
			start := time.Now()
			workqueue.ParallelizeUntil(b.Context(), 16, n, func(i int) {
				fr := &fencingv1alpha1.FencedResource{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fr-%05d", i), Namespace: ns},
					Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: fmt.Sprintf("shard-%d", i%leases)},
				}
				if err := p.env.Client.Create(b.Context(), fr); err != nil {
					b.Errorf("creating FencedResource %s/%s: %v", ns, fr.Name, err)
				}
			})
			if b.Failed() {
				b.FailNow()
			}
			b.ReportMetric(time.Since(start).Seconds(), "create-s")
			waitForStatuses(b, p.env.Client, ns, n, 2*time.Second, 10*time.Minute, "a status the operator wrote for their generation",
				func(fr *fencingv1alpha1.FencedResource) bool {
					return fr.Status.ObservedGeneration == fr.Generation && fr.Status.LeaseEpoch > 0
				})
			b.ReportMetric(time.Since(start).Seconds(), "created-and-reconciled-s")
			p.measure(*costWindow).report()
			holder.result(b)
		})
	}
	for range max(*costRepeats, 1) {
		for _, leases := range counts(b, *costLeases) {
			for _, replicas := range counts(b, *costReplicas) {
				for _, impl := range []string{"fencekit", "client-go"} {
					b.Run(fmt.Sprintf("leases=%d/replicas=%d/impl=%s", leases, replicas, impl), func(b *testing.B) {
						leasePoint(b, elector, leases, replicas, impl, max(*costQPS, 2*leases))
					})
				}
			}
		}
		// The replicas' clients limited to exactly their Leases' renewal rate (0.5 a second each): what a
		// replica's own queue does to its renewals.
		if n := *costLimited; n > 0 {
			for _, impl := range []string{"fencekit", "client-go"} {
				b.Run(fmt.Sprintf("leases=%d/replicas=2/impl=%s/qps=%d", n, impl, n/2), func(b *testing.B) {
					leasePoint(b, elector, n, 2, impl, n/2)
				})
			}
		}
	}
}

// leasePoint runs one Lease point: replicas processes of leases electors each (impl's), each replica's
// client limited to qps requests a second (bursts of twice that), the first replica leading every Lease.
func leasePoint(b *testing.B, elector string, leases, replicas int, impl string, qps int) {
	p := startCostPoint(b)
	ns := p.env.Namespace(b)
	var procs []*electorProcess
	for r := range replicas {
		procs = append(procs, startElectors(b, elector, p.kubeconfig, ns, impl, fmt.Sprintf("r%d", r), leases, r == 0, qps))
	}
	time.Sleep(3 * time.Second) // past the acquisitions and their Events, as each replica's own window
	p.measure(*costWindow).report()
	var standbyRSS, standbyReq float64
	var leading int
	var lost int64
	for i, proc := range procs {
		res := proc.result(b)
		leading, lost = leading+res.Leading, lost+res.Lost
		if i == 0 {
			b.ReportMetric(res.RSSMiB, "leader-replica-rss-MiB")
			b.ReportMetric(res.RequestsMin/60, "leader-replica-req/s")
			continue
		}
		standbyRSS, standbyReq = max(standbyRSS, res.RSSMiB), max(standbyReq, res.RequestsMin/60)
	}
	b.ReportMetric(standbyRSS, "standby-replica-rss-MiB")
	b.ReportMetric(standbyReq, "standby-replica-req/s")
	// A replica that cannot renew its Leases in time loses some (and a standby takes them): the Leases led
	// at the end of the window, and the leaderships lost in it.
	b.ReportMetric(float64(leading), "leases-led")
	b.ReportMetric(float64(lost), "leaderships-lost")
}

// costPoint is one point of the sweep: a control plane of its own (so that no earlier point's objects,
// watch cache or heap are in its figures) with fencekit's CRDs and Lease policy, and the operator running
// as a process against it (no webhook: only the CRD rule guards the writes here).
type costPoint struct {
	b                         *testing.B
	env                       *testenv.Env
	kubeconfig                string
	apiserver, etcd, operator int
}

func startCostPoint(b *testing.B) *costPoint {
	b.Helper()
	e, err := testenv.Start(testenv.WithLeasePolicy())
	if err != nil {
		b.Fatalf("starting the point's control plane: %v", err)
	}
	b.Cleanup(func() {
		if err := e.Stop(); err != nil {
			b.Errorf("stopping the point's control plane: %v", err)
		}
	})
	p := &costPoint{b: b, env: e, kubeconfig: adminKubeconfig(b, e)}
	p.apiserver, p.etcd = controlPlanePIDs(b, e)
	p.operator = startManagerProcess(b, e)
	return p
}

type costMeasure struct {
	b                                  *testing.B
	window                             time.Duration
	apiserverCPU, etcdCPU              time.Duration
	apiserverRSS, etcdRSS, operatorRSS int64 // KiB, at the end of the window
	requests                           float64
	watches                            float64
}

// measure reads CPU times and the apiserver's request counter, waits for window (the time over which a
// rate is measured: there is nothing to wait for but the clock), and reads them again.
func (p *costPoint) measure(window time.Duration) costMeasure {
	b := p.b
	b.Helper()
	cpu := func(pid int) time.Duration {
		d, err := procfs.CPUTime(pid)
		if err != nil {
			b.Fatalf("CPU time of pid %d: %v", pid, err)
		}
		return d
	}
	rss := func(pid int) int64 {
		kib, err := procfs.MemoryKiB(pid, "VmRSS")
		if err != nil {
			b.Fatalf("memory of pid %d: %v", pid, err)
		}
		return kib
	}
	a0, e0, r0 := cpu(p.apiserver), cpu(p.etcd), apiserverMetrics(b, p.env)
	time.Sleep(window)
	a1, e1, r1 := cpu(p.apiserver), cpu(p.etcd), apiserverMetrics(b, p.env)
	return costMeasure{
		b: b, window: window,
		apiserverCPU: a1 - a0, etcdCPU: e1 - e0,
		apiserverRSS: rss(p.apiserver), etcdRSS: rss(p.etcd), operatorRSS: rss(p.operator),
		requests: r1.requests - r0.requests, watches: r1.watches,
	}
}

func (m costMeasure) report() {
	s := m.window.Seconds()
	m.b.ReportMetric(m.apiserverCPU.Seconds()/s, "apiserver-cpu-s/s")
	m.b.ReportMetric(m.etcdCPU.Seconds()/s, "etcd-cpu-s/s")
	m.b.ReportMetric(float64(m.apiserverRSS)/1024, "apiserver-rss-MiB")
	m.b.ReportMetric(float64(m.etcdRSS)/1024, "etcd-rss-MiB")
	m.b.ReportMetric(float64(m.operatorRSS)/1024, "operator-rss-MiB")
	m.b.ReportMetric(m.requests/s, "apiserver-req/s")
	m.b.ReportMetric(m.watches, "watches-open")
}

type apiserverCounts struct{ requests, watches float64 }

// apiserverMetrics reads the apiserver's own /metrics: every request it has served so far (watches and
// the long-running CONNECT excluded) and the watches open now.
func apiserverMetrics(b *testing.B, e *testenv.Env) apiserverCounts {
	b.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(b.Context())
	if err != nil {
		b.Fatalf("reading the apiserver's /metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		b.Fatalf("parsing the apiserver's /metrics: %v", err)
	}
	var c apiserverCounts
	req, ok := families["apiserver_request_total"]
	if !ok {
		b.Fatal("the apiserver's /metrics has no apiserver_request_total")
	}
	for _, m := range req.GetMetric() {
		verb := labelValue(m.GetLabel(), "verb")
		if verb == "WATCH" || verb == "WATCHLIST" || verb == "CONNECT" {
			continue
		}
		c.requests += m.GetCounter().GetValue()
	}
	lr, ok := families["apiserver_longrunning_requests"]
	if !ok {
		b.Fatal("the apiserver's /metrics has no apiserver_longrunning_requests")
	}
	for _, m := range lr.GetMetric() {
		if v := labelValue(m.GetLabel(), "verb"); v == "WATCH" || v == "WATCHLIST" {
			c.watches += m.GetGauge().GetValue()
		}
	}
	return c
}

// controlPlanePIDs finds e's kube-apiserver (by its secure port) and etcd (by its client URL) among this
// process's children.
func controlPlanePIDs(b *testing.B, e *testenv.Env) (apiserver, etcd int) {
	b.Helper()
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		b.Fatal(err)
	}
	etcdURL := e.Environment.ControlPlane.Etcd.URL.String()
	for _, pid := range procfs.Children(os.Getpid()) {
		args, err := procfs.Cmdline(pid)
		if err != nil || len(args) == 0 {
			continue
		}
		switch filepath.Base(args[0]) {
		case "kube-apiserver":
			if slices.Contains(args, "--secure-port="+u.Port()) {
				apiserver = pid
			}
		case "etcd":
			if slices.Contains(args, "--listen-client-urls="+etcdURL) {
				etcd = pid
			}
		}
	}
	if apiserver == 0 || etcd == 0 {
		b.Fatalf("the point's processes not found among this process's children (kube-apiserver on port %s: pid %d, etcd at %s: pid %d)", u.Port(), apiserver, etcdURL, etcd)
	}
	return apiserver, etcd
}

// electorProcess is one replica: a process running n electors (test/bench/elector/hundred).
type electorProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	once  sync.Once
}

// electorResult is what hundred prints once its window has passed.
type electorResult struct {
	Leading     int     `json:"leading"`
	Lost        int64   `json:"lostInWindow"`
	RSSMiB      float64 `json:"rssMiB"`
	RequestsMin float64 `json:"requestsPerMin"`
}

// startElectors starts a replica and returns once it is ready: every elector leads (lead) or observed a
// leader. Its own request-rate window is the benchmark's.
func startElectors(b *testing.B, bin, kubeconfig, ns, impl, identity string, n int, lead bool, qps int) *electorProcess {
	b.Helper()
	args := []string{"-kubeconfig", kubeconfig, "-namespace", ns, "-impl", impl, "-identity", identity,
		"-n", fmt.Sprint(n), fmt.Sprintf("-lead=%t", lead), "-window", costWindow.String(), "-partial", "-qps", fmt.Sprint(qps)}
	if *costMemProfiles != "" {
		args = append(args, "-memprofile", filepath.Join(*costMemProfiles, strings.NewReplacer("/", "_", "=", "-").Replace(b.Name())+"_"+identity+".pprof"))
	}
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &electorProcess{cmd: cmd, stdin: stdin, lines: make(chan string, 4), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	b.Cleanup(func() { p.stop(b) })
	select {
	case line, ok := <-p.lines:
		if !ok || line != "ready" {
			b.Fatalf("replica %s (%d %s electors): %q before ready", identity, n, impl, line)
		}
	case <-time.After(3 * time.Minute):
		b.Fatalf("replica %s (%d %s electors) not ready after 3 minutes", identity, n, impl)
	}
	return p
}

// result waits for the replica's JSON line (printed at the end of its window).
func (p *electorProcess) result(b *testing.B) electorResult {
	b.Helper()
	select {
	case line, ok := <-p.lines:
		var r electorResult
		if !ok {
			b.Fatal("replica exited before printing its result")
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			b.Fatalf("replica's result %q: %v", line, err)
		}
		return r
	case <-time.After(*costWindow + time.Minute):
		b.Fatal("replica printed no result")
	}
	return electorResult{}
}

// stop closes the replica's stdin (it releases its Leases and exits) and waits; killed after 30 s.
func (p *electorProcess) stop(b *testing.B) {
	p.once.Do(func() {
		_ = p.stdin.Close()
		exited := make(chan struct{})
		go func() { <-p.done; _ = p.cmd.Wait(); close(exited) }() // the exit status says nothing here
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			b.Logf("replica %v killed: it did not exit within 30 s of its stdin closing", p.cmd.Args)
		}
	})
}

// buildCommand builds a main package of this repository into the benchmark's temporary directory.
func buildCommand(b *testing.B, pkg string) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), filepath.Base(pkg))
	build := exec.CommandContext(b.Context(), "go", "build", "-o", bin, pkg)
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// adminKubeconfig writes a kubeconfig of a system:masters user of control plane e and returns its path.
func adminKubeconfig(b *testing.B, e *testenv.Env) string {
	b.Helper()
	user, err := e.Environment.AddUser(envtestAdmin, nil)
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// counts parses a comma-separated list of positive numbers.
func counts(b *testing.B, list string) []int {
	b.Helper()
	var ns []int
	for f := range strings.SplitSeq(list, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n <= 0 {
			b.Fatalf("%q in %q is not a positive number", f, list)
		}
		ns = append(ns, n)
	}
	return ns
}

// labelValue is the value of the label name of a metric; empty if it has none.
func labelValue(labels []*dto.LabelPair, name string) string {
	for _, l := range labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// envtestAdmin is the user of the kubeconfig the benchmark's child processes get.
var envtestAdmin = envtest.User{Name: "admin", Groups: []string{"system:masters"}}
