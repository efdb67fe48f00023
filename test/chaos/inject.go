package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// inject plays one event and reports whether it took effect.
func (r *run) inject(ctx context.Context, e Event) bool {
	idx, lease, isHolder := r.holder(ctx)
	if !isHolder {
		idx = e.Fallback
	}
	if e.Fault == F4Partition && e.Bystander {
		idx = (idx + 1 + e.Fallback%(r.cfg.Workers-1)) % r.cfg.Workers
	}
	r.mu.Lock()
	p := r.procs[idx]
	r.mu.Unlock()
	logf := func(format string, args ...any) {
		r.cfg.Logf("%s %s on w%d (%s): %s", r.cfg.Name, e.Fault, idx+1, p.identity, fmt.Sprintf(format, args...))
	}
	switch e.Fault {
	case F1Kill, F2Term:
		sig := map[Fault]syscall.Signal{F1Kill: syscall.SIGKILL, F2Term: syscall.SIGTERM}[e.Fault]
		if !p.alive() || p.signal(sig) != nil {
			return false
		}
		if !p.wait(15 * time.Second) {
			_ = p.signal(syscall.SIGKILL)
			<-p.exited
		}
		logf("%s, holder=%v; restart in %s", sig, isHolder, e.Length)
		_ = sleep(ctx, e.Length)
		if err := r.start(idx); err != nil {
			logf("restart failed: %v", err)
		}
		return true
	case F3Zombie:
		return r.zombie(ctx, p, e, logf)
	case F4Partition:
		mode := Blackhole
		if e.Drop {
			mode = Drop
		}
		r.proxies[idx].Set(mode, 0)
		logf("partitioned (%s) for %s", mode, e.Length)
		_ = sleep(ctx, e.Length)
		r.proxies[idx].Set(Pass, 0)
		return true
	case F5Slow:
		for _, px := range r.proxies {
			px.Set(Delay, e.Delay)
		}
		logf("every worker's link delayed %s per chunk for %s", e.Delay, e.Length)
		_ = sleep(ctx, e.Length)
		for _, px := range r.proxies {
			px.Set(Pass, 0)
		}
		return true
	case F6APIServerRestart, F7EtcdRestart:
		component := map[Fault]string{F6APIServerRestart: "kube-apiserver", F7EtcdRestart: "etcd"}[e.Fault]
		if r.cl.Restart == nil {
			return false
		}
		start := time.Now()
		if e.Fault == F6APIServerRestart {
			// The workers find the apiserver gone (their connections reset and refused) until the observer
			// watches again, so that no write escapes the ground truth while its watch cache starts.
			for _, px := range r.proxies {
				px.Set(Drop, 0)
			}
			defer func() {
				for _, px := range r.proxies {
					px.Set(Pass, 0)
				}
			}()
		}
		err := r.cl.Restart(ctx, component, e.Length)
		if err != nil {
			logf("restarting %s: %v", component, err)
			return false
		}
		up := time.Now()
		for !r.obs.WatchingSince(up) && time.Since(up) < 30*time.Second {
			_ = sleep(ctx, 50*time.Millisecond)
		}
		_ = sleep(ctx, 500*time.Millisecond)
		logf("%s restarted after %s down; serving again after %s", component, e.Length, up.Sub(start).Round(time.Millisecond))
		return true
	case F9Starve:
		logf("niced to 19 and stopped in bursts of %s for %s", e.Delay, e.Length)
		p.nice(19)
		defer p.nice(0)
		end := time.Now().Add(e.Length)
		for time.Now().Before(end) && p.alive() {
			_ = p.signal(syscall.SIGSTOP)
			_ = sleep(ctx, e.Delay)
			_ = p.signal(syscall.SIGCONT)
			_ = sleep(ctx, time.Duration(20+r.rng.IntN(150))*time.Millisecond)
		}
		return true
	case F10Webhook:
		if r.cl.Webhook == nil {
			return false
		}
		if e.Drop {
			r.cl.Webhook.Set(Drop, 0)
		} else {
			r.cl.Webhook.Set(Delay, e.Delay)
		}
		logf("webhook drop=%v delay=%s for %s", e.Drop, e.Delay, e.Length)
		_ = sleep(ctx, e.Length)
		r.cl.Webhook.Set(Pass, 0)
		return true
	case F8ClockSkew:
		if !r.cfg.Fenced || !isHolder {
			return false
		}
		return r.skew(ctx, idx, e, logf)
	case F11CertRotation:
		if !r.cfg.Fenced || r.cl.Rotator == nil {
			return false
		}
		rot, err := r.cl.Rotator.Rotate(ctx, e.Rotation, e.Delay, r.probeWebhook, webhookCallFailed)
		if err != nil {
			logf("rotating the webhook certificate (%s): %v", e.Rotation, err)
			return false
		}
		logf("webhook CA and certificate rotated (%s, %s between the halves): the server presented the new certificate after %s, the apiserver called the webhook with the new CA after %s; %d probe requests failed calling the webhook meanwhile",
			e.Rotation, e.Delay.Round(time.Millisecond), rot.Served.Round(time.Millisecond), rot.Trusted.Round(time.Millisecond), rot.Failures)
		_ = sleep(ctx, e.Length)
		return true
	case F12Adversary:
		if !r.cfg.Fenced || lease == nil || !isHolder {
			return false
		}
		r.adversaries(ctx, idx, lease, logf)
		_ = sleep(ctx, e.Length)
		return true
	}
	return false
}

// skew runs the holder's elector clock at e.Slow and the standbys' at e.Fast, and cuts the holder off from
// the apiserver (its proxy drops every connection) for a time after which the standbys, on their fast
// clocks, have taken the Lease over, but before the holder, on its slow clock, steps down (renewDeadline
// since its last renewal): when it is back, it believes it still leads and writes with its old epoch.
func (r *run) skew(ctx context.Context, holder int, e Event, logf func(string, ...any)) bool {
	t := r.cfg.Timings
	for i := range r.cfg.Workers {
		rate := e.Fast
		if i == holder {
			rate = e.Slow
		}
		r.setClockRate(i, rate)
	}
	defer func() {
		for i := range r.cfg.Workers {
			r.setClockRate(i, 1)
		}
	}()
	// A renewal of the holder's (at most RetryPeriod on its slow clock) lets the standbys' electors re-arm
	// their timers on their fast clocks: a timer armed before a rate change keeps its length.
	if err := sleep(ctx, time.Duration(float64(t.RetryPeriod)/e.Slow)+200*time.Millisecond); err != nil {
		return false
	}
	lo, hi := skewWindow(t, e.Slow, e.Fast)
	cut := lo
	if hi > lo {
		cut = (lo + hi) / 2
	}
	r.proxies[holder].Set(Drop, 0)
	_ = sleep(ctx, cut)
	r.proxies[holder].Set(Pass, 0)
	logf("the holder's clock at %.2fx, the standbys' at %.2fx; the holder cut off for %s (the standbys take over after %s, the holder steps down after %s)",
		e.Slow, e.Fast, cut.Round(time.Millisecond), lo.Round(time.Millisecond), (hi + 250*time.Millisecond).Round(time.Millisecond))
	_ = sleep(ctx, e.Length)
	return true
}

// skewWindow is when F8 heals the cut-off holder: after lo the standbys, on clocks at rate fast, have
// taken the Lease over (at most LeaseDuration/fast after the holder's last renewal, plus a request); before
// hi the holder, on a clock at rate slow, has not stepped down (RenewDeadline/slow after its last renewal,
// which was up to RetryPeriod/slow before the cut) and still has time for a write (250 ms).
func skewWindow(t Timings, slow, fast float64) (lo, hi time.Duration) {
	lo = time.Duration(float64(t.LeaseDuration)/fast) + 100*time.Millisecond
	hi = time.Duration(float64(t.RenewDeadline-t.RetryPeriod)/slow) - 250*time.Millisecond
	return lo, hi
}

// setClockRate sets the rate of worker i's elector clock (its current incarnation's).
func (r *run) setClockRate(i int, rate float64) {
	r.mu.Lock()
	p := r.procs[i]
	r.mu.Unlock()
	if p == nil || !p.alive() {
		return
	}
	if err := os.WriteFile(p.clockFile, []byte(strconv.FormatFloat(rate, 'f', -1, 64)), 0o644); err == nil {
		_ = p.signal(syscall.SIGUSR2)
	}
}

// probeWebhook makes an admission request that the webhook answers (a dry-run create of a FencedResource):
// its error says whether the apiserver could call the webhook (F11).
func (r *run) probeWebhook(ctx context.Context) error {
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "webhook-probe"},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: r.lease}}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return r.cl.Admin.Create(pctx, fr, client.DryRunAll)
}

// webhookCallFailed reports whether err is the apiserver's failure to call a webhook (failurePolicy Fail).
func webhookCallFailed(err error) bool {
	return strings.Contains(err.Error(), "failed calling webhook")
}

// zombie arms the worker's self-stop (SIGUSR1), waits until it has stopped itself before a write, keeps it
// stopped for e.Length and continues it.
func (r *run) zombie(ctx context.Context, p *proc, e Event, logf func(string, ...any)) bool {
	if !p.alive() || p.signal(syscall.SIGUSR1) != nil {
		return false
	}
	deadline := time.Now().Add(3 * time.Second)
	for !p.stopped() {
		if time.Now().After(deadline) || !p.alive() {
			logf("did not reach a write within 3s: not applied")
			return false
		}
		_ = sleep(ctx, 10*time.Millisecond)
	}
	logf("stopped before a write; continued in %s", e.Length)
	_ = sleep(ctx, e.Length)
	_ = p.signal(syscall.SIGCONT)
	return true
}

// adversaries make the writes fencekit must refuse, recording them like any client.
func (r *run) adversaries(ctx context.Context, holder int, lease *coordinationv1.Lease, logf func(string, ...any)) {
	epoch, _ := strconv.ParseInt(lease.Annotations[protocol.EpochAnnotation], 10, 64)
	holderID := ptr.Deref(lease.Spec.HolderIdentity, "")
	other := (holder + 1) % r.cfg.Workers
	key := types.NamespacedName{Namespace: r.ns, Name: r.target}
	tok := func(e int64, h string) elector.Token {
		return elector.Token{Epoch: e, Lease: types.NamespacedName{Namespace: r.ns, Name: r.lease}, Holder: h}
	}
	attacks := []struct {
		name  string
		user  int
		epoch int64
		write func(c client.Client, id string) error
	}{
		{"no-token (a stale replica of the holder's user, plain merge patch)", holder, 0, func(c client.Client, id string) error {
			patch, err := json.Marshal(map[string]any{"spec": map[string]any{"data": map[string]any{"op": id}}})
			if err != nil {
				return err
			}
			return c.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, client.RawPatch(types.MergePatchType, patch))
		}},
		{"copied-token (another user presenting the current epoch and holder)", other, epoch, func(c client.Client, id string) error {
			_, err := fencing.NewWriter(c).Set(ctx, tok(epoch, holderID), key, map[string]any{"op": id})
			return err
		}},
		{"future-epoch (the holder's user presenting the next epoch)", holder, epoch + 1, func(c client.Client, id string) error {
			_, err := fencing.NewWriter(c).Set(ctx, tok(epoch+1, holderID), key, map[string]any{"op": id})
			return err
		}},
		{"stale-epoch (the holder's user presenting the previous epoch)", holder, epoch - 1, func(c client.Client, id string) error {
			_, err := fencing.NewWriter(c).Set(ctx, tok(epoch-1, holderID), key, map[string]any{"op": id})
			return err
		}},
	}
	s := runtime.NewScheme()
	_ = fencingv1alpha1.AddToScheme(s)
	for _, a := range attacks {
		if a.epoch < 1 && a.user == holder && a.name[:8] != "no-token" {
			continue // no previous epoch to present
		}
		c, err := client.New(r.configs[a.user], client.Options{Scheme: s})
		if err != nil {
			logf("adversary client: %v", err)
			continue
		}
		r.advSeq++
		id := fmt.Sprintf("adversary:%d", r.advSeq)
		call := Record{Phase: "call", Op: id, Kind: KindWrite, Process: "adversary", User: r.users[a.user],
			Target: r.ns + "/" + r.target, Epoch: a.epoch, Adversary: a.name, At: time.Now().UnixNano()}
		_ = r.adv.Add(call)
		err = a.write(c, id)
		ret := Record{Phase: "return", Op: id, Kind: KindWrite, Process: "adversary", At: time.Now().UnixNano()}
		ret.Outcome, ret.Reason = Classify(err)
		if err != nil {
			ret.Error = err.Error()
		}
		_ = r.adv.Add(ret)
		logf("adversary %s: %s %s", a.name, ret.Outcome, ret.Reason)
	}
}
