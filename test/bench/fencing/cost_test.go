package fencing_test

import (
	"bufio"
	"context"
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
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/internal/testenv"
)

var (
	costWindow = flag.Duration("cost.window", 30*time.Second, "BenchmarkControlPlaneCost: the measuring window of each point")
	costLeases = flag.String("cost.leases", "1,10,100,1000", "BenchmarkControlPlaneCost: the Lease counts of the Lease points")
	costFRs    = flag.String("cost.fencedresources", "100,1000,10000", "BenchmarkControlPlaneCost: the FencedResource counts of the resource points")
)

// BenchmarkControlPlaneCost is issue #14's scale sweep: what fencekit costs the control plane. Each point
// runs for -cost.window on the envtest control plane with the operator (cmd/manager) running as its own
// process, and reports the kube-apiserver's and etcd's CPU use (CPU seconds per second of the window, from
// /proc/<pid>/stat) and resident memory at its end, the apiserver's requests per second (its
// apiserver_request_total, watches excluded) and the watches it has open (apiserver_longrunning_requests,
// verb WATCH), and the operator's resident memory.
//
// Points, one after the other, each in a namespace of its own whose objects are deleted afterwards:
//   - idle: nothing but the operator, the baseline every other point is read against;
//   - leases=L/replicas=R/impl=I: R replicas, each a process running L electors on Leases shard-0 ..
//     shard-<L-1> (test/bench/elector/hundred), the first leading every Lease and the others standing by,
//     at the default timings (15 s / 10 s / 2 s), with fencekit's elector (impl=fencekit) and with client-go's
//     leaderelection (impl=client-go), which a user would otherwise run; each replica's own memory and
//     request rate are reported too, and the Leases led at the end and the leaderships lost during the
//     window (a replica whose renewals cannot keep up loses Leases; after 3 minutes without every
//     Lease led the point is measured as it is);
//   - fencedresources=N: N FencedResources bound to 100 Leases held by one replica; the window starts
//     once the operator has written every resource's status.
func BenchmarkControlPlaneCost(b *testing.B) {
	setWebhook(b, false) // the operator runs without its webhook server here; only the CRD rule guards writes
	defer setWebhook(b, true)
	apiserver, etcd := controlPlanePIDs(b)
	elector := buildCommand(b, "./test/bench/elector/hundred")
	kubeconfig := adminKubeconfig(b)
	deleteAllFencedResources(b)
	operatorPID := startManagerProcess(b)
	cp := costProbe{b: b, apiserver: apiserver, etcd: etcd, operator: operatorPID}

	b.Run("idle", func(b *testing.B) {
		cp.b = b
		cp.measure(*costWindow).report()
	})
	for _, leases := range counts(b, *costLeases) {
		for _, replicas := range []int{2, 3} {
			for _, impl := range []string{"fencekit", "client-go"} {
				b.Run(fmt.Sprintf("leases=%d/replicas=%d/impl=%s", leases, replicas, impl), func(b *testing.B) {
					cp.b = b
					ns := env.Namespace(b)
					var procs []*electorProcess
					for r := range replicas {
						procs = append(procs, startElectors(b, elector, kubeconfig, ns, impl, fmt.Sprintf("r%d", r), leases, r == 0))
					}
					time.Sleep(3 * time.Second) // past the acquisitions and their Events, as each replica's own window
					cp.measure(*costWindow).report()
					var standbyRSS, standbyReq float64
					var leading int
					var lost int64
					for i, p := range procs {
						res := p.result(b)
						leading, lost = leading+res.Leading, lost+res.Lost
						if i == 0 {
							b.ReportMetric(res.RSSMiB, "leader-replica-rss-MiB")
							b.ReportMetric(res.RequestsMin/60, "leader-replica-req/s")
							continue
						}
						standbyRSS, standbyReq = max(standbyRSS, res.RSSMiB), max(standbyReq, res.RequestsMin/60)
					}
					b.ReportMetric(standbyRSS, "standby-replica-rss-MiB")
					// A replica that cannot renew its Leases in time loses some (and a standby takes them):
					// the Leases led at the end of the window, and the leaderships lost in it.
					b.ReportMetric(float64(leading), "leases-led")
					b.ReportMetric(float64(lost), "leaderships-lost")
					b.ReportMetric(standbyReq, "standby-replica-req/s")
					for _, p := range procs {
						p.stop(b)
					}
					deleteLeases(b, ns)
				})
			}
		}
	}
	for _, n := range counts(b, *costFRs) {
		b.Run(fmt.Sprintf("fencedresources=%d", n), func(b *testing.B) {
			cp.b = b
			const leases = 100
			ns := env.Namespace(b)
			holder := startElectors(b, elector, kubeconfig, ns, "fencekit", "r0", leases, true)
			start := time.Now()
			workqueue.ParallelizeUntil(b.Context(), 16, n, func(i int) {
				fr := &fencingv1alpha1.FencedResource{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fr-%05d", i), Namespace: ns},
					Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: fmt.Sprintf("shard-%d", i%leases)},
				}
				if err := env.Client.Create(b.Context(), fr); err != nil {
					b.Errorf("creating FencedResource %s/%s: %v", ns, fr.Name, err)
				}
			})
			if b.Failed() {
				b.FailNow()
			}
			b.ReportMetric(time.Since(start).Seconds(), "create-s")
			waitForEveryStatus(b, ns, n, 10*time.Minute)
			b.ReportMetric(time.Since(start).Seconds(), "created-and-reconciled-s")
			cp.measure(*costWindow).report()
			holder.result(b)
			holder.stop(b)
			deleteAllFencedResources(b)
			deleteLeases(b, ns)
		})
	}
}

// costProbe measures the control plane's and the operator's processes over a window.
type costProbe struct {
	b                         *testing.B
	apiserver, etcd, operator int
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
func (p costProbe) measure(window time.Duration) costMeasure {
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
	a0, e0, r0 := cpu(p.apiserver), cpu(p.etcd), apiserverMetrics(b)
	time.Sleep(window)
	a1, e1, r1 := cpu(p.apiserver), cpu(p.etcd), apiserverMetrics(b)
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
func apiserverMetrics(b *testing.B) apiserverCounts {
	b.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
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

// controlPlanePIDs finds envtest's kube-apiserver (by its secure port) and etcd among this process's
// children.
func controlPlanePIDs(b *testing.B) (apiserver, etcd int) {
	b.Helper()
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		b.Fatal(err)
	}
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
			etcd = pid
		}
	}
	if apiserver == 0 || etcd == 0 {
		b.Fatalf("envtest's processes not found among this process's children (kube-apiserver on port %s: pid %d, etcd: pid %d)", u.Port(), apiserver, etcd)
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
func startElectors(b *testing.B, bin, kubeconfig, ns, impl, identity string, n int, lead bool) *electorProcess {
	b.Helper()
	cmd := exec.Command(bin, "-kubeconfig", kubeconfig, "-namespace", ns, "-impl", impl, "-identity", identity,
		"-n", fmt.Sprint(n), fmt.Sprintf("-lead=%t", lead), "-window", costWindow.String(), "-partial")
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
		exited := make(chan error, 1)
		go func() { <-p.done; exited <- p.cmd.Wait() }()
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

// adminKubeconfig writes a kubeconfig of a system:masters user and returns its path.
func adminKubeconfig(b *testing.B) string {
	b.Helper()
	user, err := env.Environment.AddUser(envtestAdmin, nil)
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

// waitForEveryStatus polls until the operator has written the status of all n FencedResources of ns.
func waitForEveryStatus(b *testing.B, ns string, n int, timeout time.Duration) {
	b.Helper()
	var done int
	if err := wait.PollUntilContextTimeout(b.Context(), 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var list fencingv1alpha1.FencedResourceList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil
		}
		done = 0
		for _, fr := range list.Items {
			if fr.Status.ObservedGeneration == fr.Generation && fr.Status.LeaseEpoch > 0 {
				done++
			}
		}
		return done == n, nil
	}); err != nil {
		b.Fatalf("the operator wrote the status of %d of %d FencedResources in %s within %v", done, n, ns, timeout)
	}
}

// deleteAllFencedResources deletes every FencedResource of the cluster and waits until they are gone.
func deleteAllFencedResources(b *testing.B) {
	b.Helper()
	ctx := b.Context()
	var all fencingv1alpha1.FencedResourceList
	if err := env.Client.List(ctx, &all); err != nil {
		b.Fatal(err)
	}
	for i := range all.Items {
		if err := env.Client.Delete(ctx, &all.Items[i]); client.IgnoreNotFound(err) != nil {
			b.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var left fencingv1alpha1.FencedResourceList
		err := env.Client.List(ctx, &left)
		return err == nil && len(left.Items) == 0, nil
	}); err != nil {
		b.Fatalf("FencedResources left after deleting them: %v", err)
	}
}

// deleteLeases deletes the Leases of ns (as an admin: the Lease policy lets system:masters through); the
// operator removes its finalizer from those no FencedResource is bound to any more.
func deleteLeases(b *testing.B, ns string) {
	b.Helper()
	ctx := b.Context()
	if err := env.Client.DeleteAllOf(ctx, &coordinationv1.Lease{}, client.InNamespace(ns)); err != nil {
		b.Fatalf("deleting the Leases of %s: %v", ns, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		var left coordinationv1.LeaseList
		err := env.Client.List(ctx, &left, client.InNamespace(ns))
		return err == nil && len(left.Items) == 0, nil
	}); err != nil {
		b.Fatalf("Leases left in %s after deleting them: %v", ns, err)
	}
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
