package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/test/util/kubeconfig"
)

// Cluster is the control plane a run uses: fencekit's CRD, Lease policy and webhook installed, the
// operator running.
type Cluster struct {
	// Admin is an admin client (the observer, the setup).
	Admin client.WithWatch
	// AdminConfig is its rest.Config; its Host is the apiserver the workers' proxies forward to.
	AdminConfig *rest.Config
	// AddUser returns a rest.Config authenticated as user name in groups (client certificates).
	AddUser func(name string, groups ...string) (*rest.Config, error)
	// BindElector binds the fencekit-elector ClusterRole to user in namespace and waits until it applies.
	BindElector func(ctx context.Context, namespace, user string) error
	// WorkerBinary is test/chaos/worker, built.
	WorkerBinary string
	// Webhook is the proxy in front of fencekit's webhook server (F10); nil disables F10.
	Webhook *Proxy
	// Rotator rotates the webhook's CA and serving certificate (F11); nil disables it.
	Rotator *WebhookRotator
	// Restart stops a control-plane component ("kube-apiserver" or "etcd"), keeps it down for down, starts
	// it again and waits until the apiserver answers (F6, F7); nil disables them.
	Restart func(ctx context.Context, component string, down time.Duration) error
}

// Timings are the elector's and the workload's.
type Timings struct {
	LeaseDuration, RenewDeadline, RetryPeriod, SafetyMargin time.Duration
	WriteInterval, ReadInterval                             time.Duration
}

// ShortTimings: a 3 s lease, so that a run sees many acquisitions.
func ShortTimings() Timings {
	return Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 400 * time.Millisecond,
		SafetyMargin: 400 * time.Millisecond, WriteInterval: 250 * time.Millisecond, ReadInterval: 400 * time.Millisecond}
}

// RunConfig is one run: a workload, a schedule of faults, fenced or the control.
type RunConfig struct {
	// Name names the run's namespace and directory.
	Name string
	Seed int64
	// Faults are drawn from by the schedule.
	Faults []Fault
	// Fenced runs fencekit; false runs the negative control (client-go leaderelection + ConfigMap).
	Fenced   bool
	Duration time.Duration
	Workers  int
	Timings  Timings
	// Dir receives the histories: one *.ops.jsonl per worker process, adversary.ops.jsonl,
	// observer.jsonl, report.json and, for a target that is not linearizable, its HTML visualization.
	Dir string
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// RunResult is what a run did and what the checker found.
type RunResult struct {
	Config   RunConfig `json:"-"`
	Schedule []Event   `json:"schedule"`
	// Applied counts the events that took effect per fault (a zombie that never reached a write, for
	// example, did not).
	Applied map[Fault]int `json:"applied"`
	Report  Report        `json:"report"`
}

type run struct {
	cfg      RunConfig
	cl       Cluster
	ns       string
	lease    string
	target   string
	rng      *rand.Rand
	mu       sync.Mutex
	procs    []*proc  // current incarnation per worker
	proxies  []*Proxy // per worker
	kubecfgs []string // per worker
	users    []string // per worker
	configs  []*rest.Config
	applied  map[Fault]int
	adv      *Recorder
	advSeq   int
	obs      *Observer
}

// Run plays one run and checks its history.
func Run(ctx context.Context, cl Cluster, cfg RunConfig) (*RunResult, error) {
	if cfg.Workers == 0 {
		cfg.Workers = 3
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, cl: cl, lease: "target-writer", target: "target", applied: map[Fault]int{},
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 1))}
	res := &RunResult{Config: cfg, Schedule: Schedule(cfg.Seed, cfg.Faults, cfg.Duration, cfg.Timings.LeaseDuration, cfg.Workers)}
	for _, e := range res.Schedule {
		cfg.Logf("%s schedule: %s", cfg.Name, e)
	}
	defer r.teardown()
	obs, err := r.setup(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.waitForHolder(ctx); err != nil {
		return nil, err
	}
	for _, e := range res.Schedule {
		if err := sleep(ctx, e.After); err != nil {
			return nil, err
		}
		if r.inject(ctx, e) {
			r.applied[e.Fault]++
		}
	}
	// A quiet tail: a zombie continued by the last event makes its late write, the workers settle.
	if err := sleep(ctx, 2*cfg.Timings.LeaseDuration); err != nil {
		return nil, err
	}
	r.teardown()
	if err := obs.Stop(time.Second); err != nil {
		return nil, fmt.Errorf("observer: %w", err)
	}
	res.Applied = r.applied
	h, err := LoadHistory(cfg.Dir, r.ns+"/"+r.target, r.ns+"/"+r.lease, cfg.Fenced)
	if err != nil {
		return nil, err
	}
	res.Report = Check(h, func(target string, lin Linearization) {
		path := filepath.Join(cfg.Dir, "linearizability-"+strings.ReplaceAll(target, "/", "_")+".html")
		if err := VisualizeTo(path, lin); err != nil {
			cfg.Logf("visualizing %s: %v", target, err)
		}
	})
	if b, err := json.MarshalIndent(res, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(cfg.Dir, "report.json"), b, 0o644)
	}
	return res, nil
}

// LoadHistory reads a run's directory back: replaying a failed run's check needs nothing else.
func LoadHistory(dir, target, lease string, fenced bool) (History, error) {
	ops, err := ReadOps(dir)
	if err != nil {
		return History{}, err
	}
	versions, err := ReadJSONLines[Version](filepath.Join(dir, "observer.jsonl"))
	if err != nil {
		return History{}, err
	}
	return History{Ops: ops, Versions: versions, Bindings: map[string]string{target: lease}, Fenced: fenced}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (r *run) setup(ctx context.Context) (*Observer, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.Name}}
	if err := r.cl.Admin.Create(ctx, ns); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", r.cfg.Name, err)
	}
	r.ns = ns.Name
	obs, err := Observe(ctx, r.cl.Admin, r.ns, filepath.Join(r.cfg.Dir, "observer.jsonl"))
	if err != nil {
		return nil, err
	}
	r.obs = obs
	if r.cfg.Fenced {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: r.target, Namespace: r.ns},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: r.lease}}
		if err := r.cl.Admin.Create(ctx, fr); err != nil {
			return nil, fmt.Errorf("declaring FencedResource %s: %w", r.target, err)
		}
	}
	if r.adv, err = NewRecorder(filepath.Join(r.cfg.Dir, "adversary.ops.jsonl")); err != nil {
		return nil, err
	}
	apiserver, err := url.Parse(r.cl.AdminConfig.Host)
	if err != nil {
		return nil, err
	}
	for i := 1; i <= r.cfg.Workers; i++ {
		user := fmt.Sprintf("%s-w%d", r.ns, i)
		var groups []string
		if !r.cfg.Fenced {
			groups = []string{"system:masters"} // the control needs no fencekit role
		}
		ucfg, err := r.cl.AddUser(user, groups...)
		if err != nil {
			return nil, err
		}
		if r.cfg.Fenced {
			if err := r.cl.BindElector(ctx, r.ns, user); err != nil {
				return nil, err
			}
		}
		p, err := NewProxy("127.0.0.1:0", apiserver.Host)
		if err != nil {
			return nil, err
		}
		kc := filepath.Join(r.cfg.Dir, fmt.Sprintf("kubeconfig-w%d", i))
		proxied := rest.CopyConfig(ucfg)
		proxied.Host = "https://" + p.Addr()
		if err := kubeconfig.Write(kc, proxied); err != nil {
			return nil, err
		}
		r.users, r.configs = append(r.users, user), append(r.configs, ucfg)
		r.proxies, r.kubecfgs = append(r.proxies, p), append(r.kubecfgs, kc)
		r.procs = append(r.procs, nil)
		if err := r.start(i - 1); err != nil {
			return nil, err
		}
	}
	return obs, nil
}

// start starts the next incarnation of worker i.
func (r *run) start(i int) error {
	inc := 1
	if old := r.procs[i]; old != nil {
		inc = old.incarnation + 1
	}
	mode := "fenced"
	if !r.cfg.Fenced {
		mode = "unfenced"
	}
	name := fmt.Sprintf("w%d-%d", i+1, inc)
	f := WorkerFlags{Mode: mode, Namespace: r.ns, Lease: r.lease, Target: r.target, Identity: name, User: r.users[i],
		History: filepath.Join(r.cfg.Dir, name+".ops.jsonl"), ClockFile: filepath.Join(r.cfg.Dir, name+".clock"), Timings: r.cfg.Timings}
	p, err := startProc(r.cl.WorkerBinary, i+1, inc, r.kubecfgs[i], filepath.Join(r.cfg.Dir, name+".log"), f)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.procs[i] = p
	r.mu.Unlock()
	return nil
}

func (r *run) teardown() {
	for _, p := range r.proxies {
		p.Set(Pass, 0)
	}
	if r.cl.Webhook != nil {
		r.cl.Webhook.Set(Pass, 0)
	}
	var wg sync.WaitGroup
	for _, p := range r.procs {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.terminate() }()
		}
	}
	wg.Wait()
	for _, p := range r.proxies {
		p.Close()
	}
	r.proxies = nil
	if r.adv != nil {
		_ = r.adv.Close()
		r.adv = nil
	}
}

// holder returns the index of the worker holding the Lease, and its Lease, if any.
func (r *run) holder(ctx context.Context) (int, *coordinationv1.Lease, bool) {
	var l coordinationv1.Lease
	if err := r.cl.Admin.Get(ctx, types.NamespacedName{Namespace: r.ns, Name: r.lease}, &l); err != nil {
		return 0, nil, false
	}
	h := ptr.Deref(l.Spec.HolderIdentity, "")
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.procs {
		if p != nil && p.identity == h {
			return i, &l, true
		}
	}
	return 0, &l, false
}

func (r *run) waitForHolder(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, _, ok := r.holder(ctx); ok {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: no worker acquired lease %s within 60s (see the worker logs in %s)", r.cfg.Name, r.lease, r.cfg.Dir)
}
