package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// Settings are the timings of a run.
type Settings struct {
	LeaseDuration, RenewDeadline, RetryPeriod, SafetyMargin time.Duration
	// Pause is how long W1 stays stopped; W1 is resumed no earlier than this and, in the paused-holder
	// scenario, not before W2 has written.
	Pause time.Duration
	// Interval is the time between a worker's writes.
	Interval time.Duration
}

// DefaultSettings are the design's numbers: the elector's defaults and a 20 s pause.
func DefaultSettings() Settings {
	return Settings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		SafetyMargin: 2 * time.Second, Pause: 20 * time.Second, Interval: time.Second}
}

// QuickSettings are short timings for a quick look and for the end-to-end tests.
func QuickSettings() Settings {
	return Settings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		SafetyMargin: 500 * time.Millisecond, Pause: 6 * time.Second, Interval: 500 * time.Millisecond}
}

// Target is where the workers run.
type Target struct {
	Namespace string
	// Admin sets up the run and reads its outcome.
	Admin client.WithWatch
	// W1Kubeconfig and W2Kubeconfig are the fenced workers' credentials (each should be a distinct user
	// bound to the fencekit-elector role); UnfencedKubeconfig is the control run's.
	W1Kubeconfig, W2Kubeconfig, UnfencedKubeconfig string
	// WorkerBinary is examples/worker, built.
	WorkerBinary string
	// W1User is the user of W1Kubeconfig (the Controller scenario grants it what the operator needs), and
	// ControllerBinary examples/controller, built (the Controller scenario only).
	W1User, ControllerBinary string
}

// Scenario is what happens to W1.
type Scenario string

const (
	// PausedHolder: W1 is stopped just before a write, longer than its lease; W2 takes over and writes;
	// W1 resumes and makes its write.
	PausedHolder Scenario = "paused-holder"
	// PausedBeforeTakeoverWrite: as PausedHolder, but W1 resumes after W2 acquired and before W2 wrote
	// anything (W2 only holds the Lease): fence-on-acquire alone must refuse W1's write.
	PausedBeforeTakeoverWrite Scenario = "paused-before-takeover-write"
	// Crash: W1 is killed with SIGKILL after its first write; W2 takes over after the lease.
	Crash Scenario = "crash"
)

// Written is one admitted write, as a watch on the target saw it.
type Written struct {
	Epoch  int64
	Writer string
}

// Result is what a run showed.
type Result struct {
	Scenario Scenario
	Fenced   bool
	// Target names what the workers wrote, for the summary's heading (default: a FencedResource, or a
	// ConfigMap unfenced).
	Target   string
	Settings Settings
	// Events are the workers' and the demo's steps, in time order.
	Events []Event
	// W1Epoch and W2Epoch are the epochs the workers acquired (fenced runs).
	W1Epoch, W2Epoch int64
	// Stopped and Resumed are when W1 was stopped and resumed (zero in Crash).
	Stopped, Resumed time.Duration
	// LateWrite is W1's write after it resumed (PausedHolder and PausedBeforeTakeoverWrite).
	LateWrite Event
	// History is every admitted write to the target, in order, and Final the stored data at the end.
	History []Written
	Final   map[string]any
}

// StaleAdmitted reports whether a write by W1 was admitted after W2 took over.
func (r *Result) StaleAdmitted() bool { return r.LateWrite.Accepted != nil && *r.LateWrite.Accepted }

type runner struct {
	t        Target
	s        Settings
	scenario Scenario
	fenced   bool
	name     string
	start    time.Time
	live     func(Event)
	mu       sync.Mutex
	events   []Event
	procs    []*process
}

// Run plays scenario once, fenced by fencekit or (fenced=false) with client-go's leaderelection and a
// ConfigMap, calling live (if set) for each event as it happens.
func Run(ctx context.Context, t Target, s Settings, scenario Scenario, fenced bool, live func(Event)) (*Result, error) {
	r := &runner{t: t, s: s, scenario: scenario, fenced: fenced, name: runName(scenario, fenced), start: time.Now(), live: live}
	defer r.stopAll()
	res, err := r.run(ctx)
	if res != nil {
		r.mu.Lock()
		res.Events = append([]Event(nil), r.events...)
		r.mu.Unlock()
		sort.SliceStable(res.Events, func(i, j int) bool { return res.Events[i].At < res.Events[j].At })
	}
	return res, err
}

func (r *runner) record(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.live != nil {
		r.live(e)
	}
}

func (r *runner) sayf(format string, args ...any) {
	r.record(Event{At: time.Since(r.start), Worker: "demo", Msg: fmt.Sprintf(format, args...)})
}

// names are the run's Lease and target: "fenced-paused-holder-writer" and "fenced-paused-holder" the
// first time a scenario runs in this process, with a sequence number after that.
func (r *runner) names() (lease, resource string) {
	return r.name + "-writer", r.name
}

var runs sync.Map // run name -> *atomic.Int64, how many runs used it

func runName(scenario Scenario, fenced bool) string {
	name := fmt.Sprintf("unfenced-%s", scenario)
	if fenced {
		name = fmt.Sprintf("fenced-%s", scenario)
	}
	n, _ := runs.LoadOrStore(name, new(atomic.Int64))
	if seq := n.(*atomic.Int64).Add(1); seq > 1 {
		name = fmt.Sprintf("%s-%d", name, seq)
	}
	return name
}

func (r *runner) startWorker(name, kubeconfig string, extra ...string) (*process, error) {
	lease, resource := r.names()
	args := []string{
		"--namespace=" + r.t.Namespace, "--lease=" + lease, "--resource=" + resource, "--identity=" + name,
		"--lease-duration=" + r.s.LeaseDuration.String(), "--renew-deadline=" + r.s.RenewDeadline.String(),
		"--retry-period=" + r.s.RetryPeriod.String(), "--safety-margin=" + r.s.SafetyMargin.String(),
		"--interval=" + r.s.Interval.String(),
	}
	if !r.fenced {
		args = append(args, "--unfenced")
	}
	p, err := startProcess(name, r.t.WorkerBinary, kubeconfig, nil, r.start, r.record, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, p)
	return p, nil
}

func (r *runner) stopAll() {
	for _, p := range r.procs {
		p.terminate()
	}
}

func isWrite(n int, accepted bool) func(Event) bool {
	return func(e Event) bool {
		return e.Msg == "write" && e.Write == n && e.Accepted != nil && *e.Accepted == accepted
	}
}

func isMsg(msg string) func(Event) bool { return func(e Event) bool { return e.Msg == msg } }

// takeover bounds a wait for a worker's leadership or write: generous, since CI machines are slow and
// nothing here is timed.
func (r *runner) takeover() time.Duration { return r.s.LeaseDuration*3 + 30*time.Second }

// kubeconfigs are W1's and W2's: their own users when fenced, the one unfenced user otherwise.
func (r *runner) kubeconfigs() (w1, w2 string) {
	if !r.fenced {
		return r.t.UnfencedKubeconfig, r.t.UnfencedKubeconfig
	}
	return r.t.W1Kubeconfig, r.t.W2Kubeconfig
}

// leads waits until p leads and returns the epoch it leads with.
func (r *runner) leads(ctx context.Context, p *process) (int64, error) {
	lead, err := p.waitFor(ctx, r.takeover(), "leadership", isMsg("leading"))
	return lead.Epoch, err
}

// leadsAndWrites waits until p leads and its first write is accepted, and returns the epoch it leads with.
func (r *runner) leadsAndWrites(ctx context.Context, p *process, what string) (int64, error) {
	epoch, err := r.leads(ctx, p)
	if err != nil {
		return 0, err
	}
	return epoch, r.accepted(ctx, p, what)
}

// accepted waits until p's first write is accepted; what is how an error names it.
func (r *runner) accepted(ctx context.Context, p *process, what string) error {
	_, err := p.waitFor(ctx, r.takeover(), what, isWrite(1, true))
	return err
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	res := &Result{Scenario: r.scenario, Fenced: r.fenced, Settings: r.s}
	lease, resource := r.names()

	stopWatch, err := r.watchTarget(ctx, resource)
	if err != nil {
		return nil, err
	}
	if r.fenced {
		if err := r.t.Admin.Create(ctx, &fencingv1alpha1.FencedResource{
			ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: r.t.Namespace},
			Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: lease},
		}); err != nil {
			return nil, fmt.Errorf("declaring FencedResource %s: %w", resource, err)
		}
		r.sayf("declared FencedResource %s bound to lease %s", resource, lease)
	}
	w1Config, w2Config := r.kubeconfigs()

	w1Args := []string{"--writes=2", "--stop-before-write=2"}
	if r.scenario == Crash {
		w1Args = []string{"--writes=0"}
	}
	w1, err := r.startWorker("W1", w1Config, w1Args...)
	if err != nil {
		return nil, err
	}
	if res.W1Epoch, err = r.leadsAndWrites(ctx, w1, "an accepted first write"); err != nil {
		return nil, err
	}

	w2Args := []string{"--writes=1"}
	if r.scenario == PausedBeforeTakeoverWrite {
		w2Args = []string{"--writes=-1"}
	}
	w2, err := r.startWorker("W2", w2Config, w2Args...)
	if err != nil {
		return nil, err
	}

	if r.scenario == Crash {
		if err := w1.signal(syscall.SIGKILL); err != nil {
			return nil, err
		}
		r.sayf("W1 killed with SIGKILL after its first write")
	} else {
		if _, err := w1.waitFor(ctx, 10*r.s.Interval+10*time.Second, "the pause before write 2", isMsg("pausing")); err != nil {
			return nil, err
		}
		if err := w1.signal(syscall.SIGSTOP); err != nil {
			return nil, err
		}
		if err := waitUntil(ctx, 10*time.Second, w1.stopped); err != nil {
			return nil, fmt.Errorf("W1 did not stop: %w", err)
		}
		res.Stopped = time.Since(r.start)
		r.sayf("W1 stopped with SIGSTOP just before write 2; its leadership check had passed")
	}

	if res.W2Epoch, err = r.leads(ctx, w2); err != nil {
		return nil, err
	}
	if r.scenario != PausedBeforeTakeoverWrite {
		if err := r.accepted(ctx, w2, "an accepted write"); err != nil {
			return nil, err
		}
	}

	if r.scenario != Crash {
		if wait := res.Stopped + r.s.Pause - time.Since(r.start); wait > 0 && r.scenario == PausedHolder {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err := w1.signal(syscall.SIGCONT); err != nil {
			return nil, err
		}
		res.Resumed = time.Since(r.start)
		r.sayf("W1 resumed with SIGCONT after %.1fs stopped", (res.Resumed - res.Stopped).Seconds())
		res.LateWrite, err = w1.waitFor(ctx, 30*time.Second, "its late write", func(e Event) bool { return e.Msg == "write" && e.Write == 2 })
		if err != nil {
			return nil, err
		}
	}

	r.stopAll()
	// Let the watch deliver the last writes before reading the outcome.
	time.Sleep(200 * time.Millisecond)
	res.History = stopWatch()
	res.Final, err = r.readTarget(ctx, resource)
	return res, err
}

// watchTarget records every admitted write to the run's target from a watch.
func (r *runner) watchTarget(ctx context.Context, resource string) (stop func() []Written, err error) {
	var list client.ObjectList = &fencingv1alpha1.FencedResourceList{}
	if !r.fenced {
		list = &corev1.ConfigMapList{}
	}
	w, err := r.t.Admin.Watch(ctx, list, client.InNamespace(r.t.Namespace), client.MatchingFields{"metadata.name": resource})
	if err != nil {
		return nil, fmt.Errorf("watching the target: %w", err)
	}
	var mu sync.Mutex
	var hist []Written
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			var wr Written
			switch o := ev.Object.(type) {
			case *fencingv1alpha1.FencedResource:
				if o.Spec.Data == nil {
					continue
				}
				var d map[string]any
				_ = json.Unmarshal(o.Spec.Data.Raw, &d)
				wr = Written{Epoch: o.Spec.Epoch, Writer: fmt.Sprint(d["writer"])}
			case *corev1.ConfigMap:
				wr = Written{Writer: o.Data["writer"]}
			default:
				continue
			}
			mu.Lock()
			if n := len(hist); n == 0 || hist[n-1] != wr {
				hist = append(hist, wr)
			}
			mu.Unlock()
		}
	}()
	return func() []Written {
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return hist
	}, nil
}

func (r *runner) readTarget(ctx context.Context, resource string) (map[string]any, error) {
	key := types.NamespacedName{Namespace: r.t.Namespace, Name: resource}
	out := map[string]any{}
	if r.fenced {
		var fr fencingv1alpha1.FencedResource
		if err := r.t.Admin.Get(ctx, key, &fr); err != nil {
			return nil, err
		}
		if fr.Spec.Data != nil {
			if err := json.Unmarshal(fr.Spec.Data.Raw, &out); err != nil {
				return nil, err
			}
		}
		out["(epoch)"] = fr.Spec.FencedEpoch()
		return out, nil
	}
	var cm corev1.ConfigMap
	if err := r.t.Admin.Get(ctx, key, &cm); err != nil {
		return nil, err
	}
	for k, v := range cm.Data {
		if n, err := strconv.Atoi(v); err == nil {
			out[k] = float64(n)
		} else {
			out[k] = v
		}
	}
	return out, nil
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("not within %s", timeout)
	}
	return err
}
