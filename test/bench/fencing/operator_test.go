package fencing_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/test/util/testenv"
)

const (
	scaleLeases   = 100
	scalePerLease = 10
)

// BenchmarkOperatorScale runs the operator (cmd/manager, built and started as a child process with an
// admin kubeconfig, no webhook server, no leader election) with 1,000 FencedResources bound to 100
// Leases, and measures its resident memory and how fast a Lease transition reaches the status of every
// resource bound to it. The webhook configuration is deleted for this benchmark (declarations and Lease
// updates do not need it), so that no other process serves or reconciles anything.
func BenchmarkOperatorScale(b *testing.B) {
	ctx := b.Context()
	setWebhook(b, false)
	defer setWebhook(b, true)

	// Only this benchmark's resources in the cluster: the operator caches every FencedResource.
	var all fencingv1alpha1.FencedResourceList
	if err := env.Client.List(ctx, &all); err != nil {
		b.Fatal(err)
	}
	for i := range all.Items {
		if err := env.Client.Delete(ctx, &all.Items[i]); client.IgnoreNotFound(err) != nil {
			b.Fatal(err)
		}
	}

	ns := env.Namespace(b)
	leaseOf := map[string]int{} // FencedResource name -> lease index
	workqueue.ParallelizeUntil(ctx, 8, scaleLeases, func(i int) {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("lease-%02d", i)}}
		testenv.AcquiredBy(lease, "holder-a-user", "holder-a", 1, time.Hour)
		if err := env.Client.Create(ctx, lease, testenv.Presenting(1)); err != nil {
			b.Error(err)
		}
	})
	for i := range scaleLeases {
		for j := range scalePerLease {
			leaseOf[fmt.Sprintf("fr-%02d-%d", i, j)] = i
		}
	}
	names := make([]string, 0, len(leaseOf))
	for name := range leaseOf {
		names = append(names, name)
	}
	workqueue.ParallelizeUntil(ctx, 8, len(names), func(k int) {
		fr := &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Name: names[k], Namespace: ns},
			Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: fmt.Sprintf("lease-%02d", leaseOf[names[k]])},
		}
		if err := env.Client.Create(ctx, fr); err != nil {
			b.Error(err)
		}
	})
	if b.Failed() {
		b.FailNow()
	}

	pid := startManagerProcess(b, env)
	start := time.Now()
	waitForStatuses(b, env.Client, ns, len(names), 250*time.Millisecond, 5*time.Minute, "status.leaseEpoch 1",
		func(fr *fencingv1alpha1.FencedResource) bool { return fr.Status.LeaseEpoch == 1 })
	b.ReportMetric(time.Since(start).Seconds(), "initial-status-s")

	// Let it settle, then read its memory.
	rss := settledRSS(b, pid)
	b.ReportMetric(rss, "rss-MiB")

	// Lease transitions, one Lease at a time: from the update of the Lease to the last of its resources
	// showing the new status.leaseEpoch, observed through a watch.
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	var list fencingv1alpha1.FencedResourceList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	w, err := wc.Watch(ctx, &fencingv1alpha1.FencedResourceList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	epochOf := map[string]int64{}
	for _, fr := range list.Items {
		epochOf[fr.Name] = fr.Status.LeaseEpoch
	}
	// until consumes watch events until done holds, for at most 60 s.
	until := func(what string, done func() bool) {
		deadline := time.After(60 * time.Second)
		for !done() {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					b.Fatalf("%s: the watch closed", what)
				}
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					fr := ev.Object.(*fencingv1alpha1.FencedResource)
					epochOf[fr.Name] = fr.Status.LeaseEpoch
				}
			case <-deadline:
				b.Fatalf("%s: not done after 60s", what)
			}
		}
	}
	reflected := func(lease int, epoch int64) func() bool {
		return func() bool {
			for j := range scalePerLease {
				if epochOf[fmt.Sprintf("fr-%02d-%d", lease, j)] != epoch {
					return false
				}
			}
			return true
		}
	}
	transition := func(i int, epoch int64) {
		var lease coordinationv1.Lease
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("lease-%02d", i)}, &lease); err != nil {
			b.Fatal(err)
		}
		holder := "holder-a"
		if epoch%2 == 0 {
			holder = "holder-b"
		}
		testenv.AcquiredBy(&lease, holder+"-user", holder, epoch, time.Hour)
		if err := env.Client.Update(ctx, &lease, testenv.Presenting(epoch)); err != nil {
			b.Fatal(err)
		}
	}
	lags := make([]time.Duration, 0, scaleLeases)
	for i := range scaleLeases {
		t0 := time.Now()
		transition(i, 2)
		until(fmt.Sprintf("lease-%02d at epoch 2", i), reflected(i, 2))
		lags = append(lags, time.Since(t0))
	}
	b.ReportMetric(ms(quantile(lags, 0.5)), "transition-p50-ms")
	b.ReportMetric(ms(quantile(lags, 0.99)), "transition-p99-ms")
	b.ReportMetric(ms(quantile(lags, 1)), "transition-max-ms")

	// All 100 Leases move at once (updated one after another as fast as the admin client goes): until the
	// 1,000th resource shows it.
	t0 := time.Now()
	for i := range scaleLeases {
		transition(i, 3)
	}
	updated := time.Since(t0)
	until("every lease at epoch 3", func() bool {
		for i := range scaleLeases {
			if !reflected(i, 3)() {
				return false
			}
		}
		return true
	})
	b.ReportMetric(ms(updated), "burst-updates-ms")
	b.ReportMetric(ms(time.Since(t0)), "burst-all-reflected-ms")
	b.ReportMetric(rssMiB(b, pid, "VmRSS"), "rss-after-MiB")
	b.ReportMetric(rssMiB(b, pid, "VmHWM"), "rss-peak-MiB")
}

// startManagerProcess builds cmd/manager and starts it against control plane e as an admin, without
// webhook server, metrics, probes or leader election. It checks that the binary still has those flags.
func startManagerProcess(b *testing.B, e *testenv.Env) int {
	b.Helper()
	ctx := b.Context()
	dir := b.TempDir()
	bin := filepath.Join(dir, "manager")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/manager")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/manager: %v\n%s", err, out)
	}
	help, _ := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
	flags := []string{"--kubeconfig", "--leader-elect=false", "--webhook-port=0", "--metrics-bind-address=0", "--health-probe-bind-address=0"}
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if !bytes.Contains(help, []byte("-"+name+" ")) && !bytes.Contains(help, []byte("-"+name+"\n")) {
			b.Fatalf("cmd/manager has no flag -%s any more:\n%s", name, help)
		}
	}
	kc := adminKubeconfig(b, e)
	logs, err := os.Create(filepath.Join(dir, "manager.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig", kc, "--leader-elect=false", "--webhook-port=0",
		"--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	b.Cleanup(func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }() // stopped by SIGTERM: its exit status says nothing here
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			_ = logs.Close()
			if b.Failed() {
				out, _ := os.ReadFile(logs.Name())
				if len(out) > 4000 {
					out = out[len(out)-4000:]
				}
				b.Logf("manager log (tail):\n%s", out)
			}
		})
	})
	return cmd.Process.Pid
}

// settledRSS samples the process's VmRSS every 500 ms until two consecutive 5 s windows differ by less
// than 2 % (at most 60 s), and returns the last sample in MiB.
func settledRSS(b *testing.B, pid int) float64 {
	b.Helper()
	prev := rssMiB(b, pid, "VmRSS")
	for range 12 {
		time.Sleep(5 * time.Second) // memory settling is what is measured: there is no event to wait for
		cur := rssMiB(b, pid, "VmRSS")
		if d := cur - prev; d < 0.02*prev && -d < 0.02*prev {
			return cur
		}
		prev = cur
	}
	return prev
}

// rssMiB reads a Vm* field of /proc/<pid>/status, in MiB.
func rssMiB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	kib, err := procfs.MemoryKiB(pid, field)
	if err != nil {
		b.Fatal(err)
	}
	return float64(kib) / 1024
}
