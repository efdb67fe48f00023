// Command hundred runs N electors (fencekit's, or client-go's leaderelection with -impl client-go) on N
// Leases in one process, as one replica of a sharded deployment would, and prints its resident memory and
// API request rates as one JSON line. The elector benchmark starts two of these per implementation (a
// replica that leads every Lease and one that stands by for all of them).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"

	"github.com/fencekit/fencekit/pkg/elector"
	electorbench "github.com/fencekit/fencekit/test/bench/elector"
)

// Result is what the benchmark reads.
type Result struct {
	Electors int `json:"electors"`
	Leading  int `json:"leading"`
	// Lost counts the leaderships lost during the window (a renewal not made within RenewDeadline): a
	// replica that cannot keep up with its Leases shows it here.
	Lost          int64   `json:"lostInWindow"`
	RSSMiB        float64 `json:"rssMiB"`
	RequestsMin   float64 `json:"requestsPerMin"`
	WatchesMin    float64 `json:"watchRequestsPerMin"`
	WindowSeconds float64 `json:"windowSeconds"`
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the control plane")
	ns := flag.String("namespace", "default", "namespace of the Leases")
	prefix := flag.String("identity", "replica", "identity prefix")
	n := flag.Int("n", 100, "electors (Leases shard-0 .. shard-<n-1>)")
	lead := flag.Bool("lead", true, "wait until every elector leads (else: until every one observed a leader)")
	window := flag.Duration("window", time.Minute, "request-rate window")
	partial := flag.Bool("partial", false, "if not ready within -ready-timeout, say so and measure anyway (a replica that cannot keep up with its Leases)")
	readyTimeout := flag.Duration("ready-timeout", 2*time.Minute, "how long to wait until ready")
	qps := flag.Float64("qps", 500, "client-side rate limit of the one client all electors share (burst: twice this)")
	impl := flag.String("impl", "fencekit", "fencekit or client-go")
	flag.StringVar(&memProfile, "memprofile", "", "write a heap profile (go tool pprof) to this file at the end of the window")
	flag.Parse()
	if memProfile != "" {
		runtime.MemProfileRate = 4096 // a finer profile than the default one sample per 512 KiB
	}
	klog.SetLogger(logr.Discard())
	if err := run(*impl, *kubeconfig, *ns, *prefix, *n, *lead, *partial, *window, *readyTimeout, float32(*qps)); err != nil {
		fmt.Fprintln(os.Stderr, "hundred:", err)
		os.Exit(1)
	}
}

func run(impl, kubeconfig, ns, prefix string, n int, lead, partial bool, window, readyTimeout time.Duration, qps float32) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = qps, int(2*qps) // one client for all electors: lift client-go's default 5 QPS
	var other, watches atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("watch") == "true" {
				watches.Add(1)
			} else {
				other.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var leading, observed, lost atomic.Int64
	var wg sync.WaitGroup
	reg := prometheus.NewRegistry()
	for i := range n {
		var seen atomic.Bool
		name, id := "shard-"+strconv.Itoa(i), prefix+"-"+strconv.Itoa(i)
		lead := func(ctx context.Context) {
			leading.Add(1)
			<-ctx.Done()
			leading.Add(-1)
			lost.Add(1)
		}
		observe := func() {
			if seen.CompareAndSwap(false, true) {
				observed.Add(1)
			}
		}
		switch impl {
		case "fencekit":
			e, err := elector.New(elector.Config{
				Client: cs, Namespace: ns, Name: name, Identity: id,
				OnStartedLeading: func(ctx context.Context, _ elector.Token) { lead(ctx) },
				OnNewLeader:      func(string, int64) { observe() },
			}, elector.WithMetricsRegisterer(reg))
			if err != nil {
				return err
			}
			wg.Go(func() { _ = e.Run(ctx) }) // Run competes again after losing the Lease
		case "client-go":
			le, err := electorbench.NewClientGoElector(cs, ns, name, id, true, leaderelection.LeaderCallbacks{
				OnStartedLeading: lead,
				OnStoppedLeading: func() {},
				OnNewLeader:      func(string) { observe() },
			})
			if err != nil {
				return err
			}
			wg.Go(func() { // client-go's Run returns once leadership is lost: compete again, as fencekit's does
				for ctx.Err() == nil {
					le.Run(ctx)
				}
			})
		default:
			return fmt.Errorf("unknown -impl %q", impl)
		}
	}
	ready := func() bool {
		if lead {
			return leading.Load() == int64(n)
		}
		return observed.Load() == int64(n)
	}
	for deadline := time.Now().Add(readyTimeout); !ready(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			if !partial {
				return fmt.Errorf("not ready after %v: %d leading, %d observed a leader", readyTimeout, leading.Load(), observed.Load())
			}
			fmt.Fprintf(os.Stderr, "hundred: not ready after %v: %d leading, %d observed a leader; measuring anyway\n", readyTimeout, leading.Load(), observed.Load())
			break
		}
	}
	fmt.Println("ready")
	time.Sleep(3 * time.Second) // past the acquisitions and their Events
	o0, w0, l0 := other.Load(), watches.Load(), lost.Load()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	time.Sleep(window)
	o1, w1, l1 := other.Load(), watches.Load(), lost.Load()
	res := Result{Electors: n, Leading: int(leading.Load()), Lost: l1 - l0, RSSMiB: vmRSS(), WindowSeconds: window.Seconds(),
		RequestsMin: float64(o1-o0) / window.Minutes(), WatchesMin: float64(w1-w0) / window.Minutes()}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Fprintf(os.Stderr, "hundred: %s %s x %d: RSS %.1f MiB (anonymous %.1f, file %.1f, peak %.1f), heap in use %.1f MiB (free, not returned: %.1f), stacks %.1f MiB, %d goroutines, GC target %.1f MiB; in the window %.2f MiB allocated a second, %d collections\n",
		impl, prefix, n, res.RSSMiB, status("RssAnon"), status("RssFile"), status("VmHWM"), float64(ms.HeapInuse)/(1<<20), float64(ms.HeapIdle-ms.HeapReleased)/(1<<20), float64(ms.StackInuse)/(1<<20), runtime.NumGoroutine(), float64(ms.NextGC)/(1<<20),
		float64(ms.TotalAlloc-ms0.TotalAlloc)/(1<<20)/window.Seconds(), ms.NumGC-ms0.NumGC)
	if memProfile != "" {
		if err := writeHeapProfile(memProfile); err != nil {
			return err
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // run (and hold the Leases) until stdin closes
	cancel()
	wg.Wait()
	return nil
}

// memProfile is -memprofile.
var memProfile string

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func vmRSS() float64 { return status("VmRSS") }

// status reads a memory figure of /proc/self/status in MiB (-1 if it cannot).
func status(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}
