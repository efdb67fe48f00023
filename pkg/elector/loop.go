package elector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// runner is one Run: a single goroutine that owns every decision. It sleeps on one timer (set for the next
// renewal, step-down or takeover) and wakes for watch observations, the end of PostAcquire, the end of the
// leadership context, or the end of Run.
type runner struct {
	e *Elector
	// log is the elector's logger without the Lease's values, which logger adds to each line: a logger
	// with values costs an allocation per elector (far more with some sinks) for lines that are rare.
	log      logr.Logger
	rec      events.EventRecorder
	leases   leaseRequests
	obs      *observer
	acquirer string

	term      *term                 // the Lease is held (leading or in PostAcquire), nil otherwise
	post      chan error            // PostAcquire's result for term
	held      *coordinationv1.Lease // the Lease as this holder last wrote it
	lastSent  time.Time             // send time of the last successful acquire or renew
	nextRenew time.Time
	notBefore time.Time // do not compete before this
	// postFailures counts the PostAcquire failures in a row, since the last term that started leading.
	postFailures int
	floor        int64 // highest epoch seen under this name
	slow         bool  // the last renewal was slow (slowRenewal)

	reportedHolder string
	reportedEpoch  int64
}

func (r *runner) cfg() *Config { return &r.e.cfg }

// logger is the elector's logger with the Lease and the identity.
func (r *runner) logger() logr.Logger { return withLease(r.log, r.e) }

func (r *runner) loop(ctx context.Context) {
	for ctx.Err() == nil {
		if w, idle := r.step(ctx); idle {
			r.sleep(ctx, w)
		}
	}
	r.shutdown(ctx)
}

// wakeup is what the loop sleeps on: a time, the end of the leadership context, PostAcquire's result.
type wakeup struct {
	at       time.Time
	termDone <-chan struct{}
	post     chan error
}

// step looks at the latest observation and the term, and takes the action due (an acquisition, a
// renewal, a step-down), or returns what to sleep on until one may be due (idle).
func (r *runner) step(ctx context.Context) (w wakeup, idle bool) {
	now := r.e.clock.Now()
	o := r.obs.get()
	r.noteLeader(o)
	if r.term == nil {
		tk := takeoverTime(o, r.cfg().LockDelay)
		at := tk.at
		if at.Before(r.notBefore) {
			at = r.notBefore
		}
		if !now.Before(at) {
			r.acquire(ctx, o, tk)
			return wakeup{}, false
		}
		return wakeup{at: at}, true
	}
	if r.checkObserved(ctx, o) {
		return wakeup{}, false
	}
	if !fenced(r.held) {
		r.unfenced(ctx, r.held)
		return wakeup{}, false
	}
	if r.term.ctx.Context.Err() != nil {
		r.stepDown(ctx, reasonDeadlinePassed, "the safe-work deadline passed before a renewal succeeded")
		return wakeup{}, false
	}
	stepAt := renewStepDownAt(r.lastSent, r.cfg().RenewDeadline)
	if !now.Before(stepAt) {
		r.stepDown(ctx, reasonRenewDeadline, fmt.Sprintf("no successful renewal within renewDeadline (%v)", r.cfg().RenewDeadline))
		return wakeup{}, false
	}
	if !now.Before(r.nextRenew) {
		r.renew(ctx, now, stepAt)
		return wakeup{}, false
	}
	w = wakeup{at: earliest(r.nextRenew, stepAt), termDone: r.term.ctx.Done()}
	if !r.term.handedOver {
		w.post = r.post
	}
	return w, true
}

// sleep waits until w's time, a new observation, the end of the leadership context or of Run, or
// PostAcquire's result (which it hands to postAcquired). A parked elector's stack is Run's, loop's and
// sleep's frames: each is kept small (a function of its own for the rest), so that the runtime can shrink
// the stacks of a process leading thousands of Leases.
func (r *runner) sleep(ctx context.Context, w wakeup) {
	timer := r.e.clock.NewTimer(w.at.Sub(r.e.clock.Now()))
	var postErr error
	postDone := false
	select {
	case <-ctx.Done():
	case <-r.obs.notify:
	case <-timer.C():
	case <-w.termDone:
	case postErr = <-w.post:
		postDone = true
	}
	timer.Stop()
	if postDone {
		r.postAcquired(ctx, postErr)
	}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// noteLeader raises the floor to every epoch observed (held or not, trusted or not: the elector never
// issues an epoch at or below one it has seen) and calls OnNewLeader when the observed holder or epoch
// changes.
func (r *runner) noteLeader(o observation) {
	epoch, _ := parseEpoch(o.lease)
	if epoch > r.floor {
		r.floor = epoch
	}
	h := holder(o.lease)
	if h == "" {
		return
	}
	if h == r.reportedHolder && epoch == r.reportedEpoch {
		return
	}
	r.reportedHolder, r.reportedEpoch = h, epoch
	r.logger().V(1).Info("Observed a new leader", "holder", h, "epoch", epoch)
	if f := r.cfg().OnNewLeader; f != nil {
		f(h, epoch)
	}
}

// checkObserved steps down if the watch shows a version newer than this holder's last write with another
// holder or epoch, or the Lease deleted. A newer version with the same holder and epoch (someone edited
// another field) becomes the base of the next renewal. It reports whether it stepped down.
func (r *runner) checkObserved(ctx context.Context, o observation) bool {
	if o.lease == nil {
		return r.leftTheWatch(ctx)
	}
	if o.lease.ResourceVersion == r.held.ResourceVersion {
		r.held = o.lease // the same version: the watch's copy, once it delivered it (observer.watched)
		return false
	}
	if h := holder(o.lease); h != r.e.cfg.Identity {
		r.stepDown(ctx, reasonHolderChanged, fmt.Sprintf("the Lease now names holder %q", h))
		return true
	}
	if epoch, err := parseEpoch(o.lease); err != nil || epoch != r.term.token.Epoch {
		detail := fmt.Sprintf("the Lease now carries epoch %q, not %d", o.lease.Annotations[protocol.EpochAnnotation], r.term.token.Epoch)
		r.stepDown(ctx, reasonEpochChanged, detail)
		return true
	}
	r.held = o.lease
	return false
}

// leftTheWatch reads the Lease that the watch reports gone: not found, the holder steps down; without the
// fenced label (break glass removed it, and the Lease left the label-selected watch as a deletion), the
// term ends (unfenced); with it (a watch that lost track of it), the next step checks the version read as
// any other. A read that fails is no evidence either way: the term goes on, bounded by its renewal
// deadline, and the next step reads again. It reports whether the step is to start over.
func (r *runner) leftTheWatch(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, renewStepDownAt(r.lastSent, r.cfg().RenewDeadline).Sub(r.e.clock.Now()))
	defer cancel()
	got, err := r.leases.get(rctx, r.e.lease.Name)
	switch {
	case apierrors.IsNotFound(err):
		r.obs.deleted("")
		r.stepDown(ctx, reasonLeaseDeleted, "the Lease was deleted")
		return true
	case err != nil:
		if ctx.Err() == nil {
			r.logger().Error(err, "The watch reports the Lease gone, and it cannot be read", "epoch", r.term.token.Epoch)
		}
		return false
	}
	r.obs.set(got)
	if fenced(got) {
		return r.obs.get().lease != nil
	}
	r.unfenced(ctx, got)
	return true
}

// fenced reports whether l carries the fenced label.
func fenced(l *coordinationv1.Lease) bool { return l.Labels[protocol.FencedLabel] == "true" }

// unfenced ends the term on l, a version of the Lease without the fenced label (break glass removed it:
// the watch reports it gone, or a renewal's answer or re-read shows it). From that write on no policy
// guarded the Lease's epoch, and the Lease policy lets no write label it again but an acquisition that
// takes its resourceVersion as the new epoch, so the term cannot go on (fenced_label_removed). When l still
// names this holder with the epoch, acquirer and fences annotations this term wrote, the holder releases
// it and competes for a new term at once, instead of every candidate waiting a leaseDuration (no shared
// watch shows the release; a candidate that watches the Lease by name, or reads it, may win it);
// otherwise it steps down without releasing. Another elector of this
// process that acquires meanwhile does not lead before this term ends (takeLeadership).
func (r *runner) unfenced(ctx context.Context, l *coordinationv1.Lease) {
	cfg := r.cfg()
	ours := holder(l) == cfg.Identity &&
		l.Annotations[protocol.EpochAnnotation] == strconv.FormatInt(r.term.token.Epoch, 10) &&
		l.Annotations[protocol.AcquirerAnnotation] == r.acquirer &&
		l.Annotations[protocol.FencesAnnotation] == cfg.PostAcquire.fences.String()
	detail := fmt.Sprintf("the label %s=true was removed, so no policy guards the epoch %d any more", protocol.FencedLabel, r.term.token.Epoch)
	if ours {
		r.held = l
		detail += "; released, to acquire a new epoch"
	}
	r.endTerm(ctx, &lostError{msg: fmt.Sprintf("%v: %s: %s", ErrLeadershipLost, reasonFencedLabelRemoved, detail), taken: !ours},
		reasonFencedLabelRemoved, detail, ours)
}

// acquire tries to take the Lease by compare-and-swap on the observed version (or by Create if absent):
// choose the epoch, write the acquisition, then begin the term and hand it to PostAcquire or the leader.
func (r *runner) acquire(ctx context.Context, o observation, tk takeover) {
	if tk.why == "malformed" {
		r.logger().Info("Treating the Lease as expired", "reason", tk.detail, "holder", holder(o.lease))
	}
	// Each request of an acquisition is bounded by RenewDeadline: a request on a connection that died
	// (an apiserver restart, a NAT entry dropped while this process was paused) would otherwise hang until
	// client-go's HTTP/2 health check closes it, 45 s later, or for ever over HTTP/1.1.
	rctx, cancel := context.WithTimeout(ctx, r.cfg().RenewDeadline)
	defer cancel()
	epoch, ok := r.chooseEpoch(ctx, rctx, o.lease)
	if !ok {
		return
	}
	res, sent, err := r.writeAcquisition(rctx, o.lease, epoch)
	if apierrors.IsConflict(err) && o.lease != nil {
		// Another write of the Lease came between (a label, an annotation: anyone's with RBAC on Leases).
		// Acquire on what was decided on instead of the resourceVersion: the apiserver applies the patch to
		// the Lease as it is, retrying its own conflicts, only while its spec and epoch are as observed.
		if got, perr := r.acquireOnState(rctx, o.lease, epoch); perr == nil {
			res, err = got, nil
		}
	}
	switch {
	case err == nil:
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		r.lostRace(ctx, o.lease, epoch)
		return
	default:
		r.retryLater(ctx, err, "Cannot acquire the Lease")
		return
	}
	t := r.beginTerm(ctx, res, epoch, sent, tk)
	r.handOver(t)
}

// chooseEpoch is the epoch rule (nextEpoch) applied to the observed Lease (nil: absent, in which case a List
// gives the storage revision to seed from). ok is false, and a retry scheduled, when no epoch can be chosen.
func (r *runner) chooseEpoch(ctx, rctx context.Context, observed *coordinationv1.Lease) (epoch int64, ok bool) {
	var listRV string
	if observed == nil {
		rv, err := r.leases.listRevision(rctx)
		if err != nil {
			r.retryLater(ctx, err, "Cannot list Leases to seed the epoch")
			return 0, false
		}
		listRV = rv
	}
	choice, err := nextEpoch(r.e.lease, observed, listRV, r.floor)
	if err != nil {
		r.retryLater(ctx, err, "Not acquiring: cannot choose an epoch")
		return 0, false
	}
	if choice.seed != "" {
		r.logger().Info("Seeding the epoch from a resourceVersion", "reason", choice.seed, "epoch", choice.epoch)
	}
	return choice.epoch, true
}

// writeAcquisition writes the acquisition at epoch: an Update of the observed Lease (a compare-and-swap on
// its resourceVersion) or, if there was none, a Create. sent is when the request was sent, from which the
// safe-work deadline counts.
func (r *runner) writeAcquisition(rctx context.Context, observed *coordinationv1.Lease, epoch int64) (res *coordinationv1.Lease, sent time.Time, err error) {
	cfg := r.cfg()
	a := acquisition{identity: cfg.Identity, acquirer: r.acquirer, epoch: epoch, fences: cfg.PostAcquire.fences,
		leaseDuration: cfg.LeaseDuration, now: r.e.clock.Now()}
	sent = r.e.clock.Now()
	// Every Lease write presents the epoch it writes at in the request (the Lease policy requires it).
	fm := protocol.FieldManagerFor(epoch)
	if observed == nil {
		res, err = r.leases.create(rctx, newLease(r.e.lease.Namespace, r.e.lease.Name, a), metav1.CreateOptions{FieldManager: fm})
		return res, sent, err
	}
	l := observed.DeepCopy()
	applyAcquisition(l, a)
	res, err = r.leases.update(rctx, l, metav1.UpdateOptions{FieldManager: fm})
	return res, sent, err
}

// acquireOnState writes the acquisition at epoch with a JSON patch that tests the observed Lease's spec
// (holder, times, duration, transitions) and epoch first: it is applied to the Lease as stored whatever
// else changed (labels, annotations of others), and refused once anyone has acquired, renewed or released
// it since it was observed, as the compare-and-swap would be. So a storm of writes to other fields cannot
// make every acquisition lose. It returns an error, and the caller the conflict, when the observed Lease
// has no epoch or labels to test and add to.
func (r *runner) acquireOnState(ctx context.Context, observed *coordinationv1.Lease, epoch int64) (*coordinationv1.Lease, error) {
	observedEpoch, ok := observed.Annotations[protocol.EpochAnnotation]
	if !ok || observed.Labels == nil {
		return nil, errors.New("the observed Lease has no epoch annotation or no labels")
	}
	l := observed.DeepCopy()
	cfg := r.cfg()
	applyAcquisition(l, acquisition{identity: cfg.Identity, acquirer: r.acquirer, epoch: epoch, fences: cfg.PostAcquire.fences,
		leaseDuration: cfg.LeaseDuration, now: r.e.clock.Now()})
	annotation := func(key string) string { return "/metadata/annotations/" + jsonPointerEscape(key) }
	ops := []map[string]any{
		{"op": "test", "path": "/spec", "value": observed.Spec},
		{"op": "test", "path": annotation(protocol.EpochAnnotation), "value": observedEpoch},
		{"op": "add", "path": annotation(protocol.EpochAnnotation), "value": l.Annotations[protocol.EpochAnnotation]},
		{"op": "add", "path": annotation(protocol.AcquirerAnnotation), "value": l.Annotations[protocol.AcquirerAnnotation]},
		{"op": "add", "path": "/metadata/labels/" + jsonPointerEscape(protocol.FencedLabel), "value": l.Labels[protocol.FencedLabel]},
		{"op": "add", "path": "/spec", "value": l.Spec},
		{"op": "add", "path": "/metadata/managedFields", "value": resetManagedFields()},
	}
	switch f, had := observed.Annotations[protocol.FencesAnnotation]; {
	case l.Annotations[protocol.FencesAnnotation] != "":
		ops = append(ops, map[string]any{"op": "add", "path": annotation(protocol.FencesAnnotation), "value": l.Annotations[protocol.FencesAnnotation]})
	case had:
		ops = append(ops, map[string]any{"op": "test", "path": annotation(protocol.FencesAnnotation), "value": f},
			map[string]any{"op": "remove", "path": annotation(protocol.FencesAnnotation)})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	return r.leases.patch(ctx, l.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: protocol.FieldManagerFor(epoch)})
}

// lostRace handles an acquisition someone else wrote first: re-read the Lease and decide again on what is
// there; if it looks unchanged (the conflict came from a write not yet seen), wait a retry pause first.
func (r *runner) lostRace(ctx context.Context, before *coordinationv1.Lease, epoch int64) {
	r.logger().V(1).Info("Lost an acquisition race; re-reading the Lease", "epoch", epoch)
	if got := r.reread(ctx); got == before || (got != nil && before != nil && got.ResourceVersion == before.ResourceVersion) {
		r.notBefore = r.e.clock.Now().Add(r.e.retryPause())
	}
}

// beginTerm records a successful acquisition at epoch: the term with its safe-work deadline counted from
// sent, the Lease as written, the next renewal, the metrics, the Event and the log.
func (r *runner) beginTerm(ctx context.Context, res *coordinationv1.Lease, epoch int64, sent time.Time, tk takeover) *term {
	cfg := r.cfg()
	r.floor = epoch
	token := Token{Epoch: epoch, Lease: r.e.lease, Holder: cfg.Identity}
	t := newTerm(context.WithoutCancel(ctx), r.e.clock, token, safeDeadline(sent, cfg.safeWindow()))
	r.term = t
	r.e.setTerm(t)
	r.held = res
	r.lastSent = sent
	r.nextRenew = nextRenewalAt(r.e.clock.Now(), cfg.RetryPeriod)
	r.obs.set(res)
	r.e.metrics.leases.acquired(r.e.lease.String(), epoch)
	r.rec.Eventf(res, nil, corev1.EventTypeNormal, "Acquired", "Acquire", "acquired at epoch %d by %s", epoch, cfg.Identity)
	r.logger().Info("Acquired the Lease", "epoch", epoch, "reason", tk.why, "deadline", t.getDeadline().Sub(sent))
	return t
}

// handOver starts leading at once, or first runs PostAcquire (bounded by PostAcquireTimeout) in its own
// goroutine; its result comes back to the loop (postAcquired), which starts leading or releases.
func (r *runner) handOver(t *term) {
	cfg := r.cfg()
	if cfg.PostAcquire.IsZero() {
		r.startLeading()
		return
	}
	r.post = make(chan error, 1)
	post := r.post
	pctx, cancel := context.WithTimeout(t.ctx, cfg.PostAcquireTimeout)
	go func() {
		defer cancel()
		post <- cfg.PostAcquire.Raise(pctx, t.token)
	}()
}

func (r *runner) postAcquired(ctx context.Context, err error) {
	if r.term == nil || r.term.handedOver {
		return
	}
	if err == nil {
		r.startLeading()
		return
	}
	r.postFailures++
	pause := postAcquireBackoff(r.e.retryPause(), r.postFailures)
	r.logger().Error(err, "PostAcquire failed; releasing the Lease", "epoch", r.term.token.Epoch, "failuresInARow", r.postFailures, "retryIn", pause)
	r.endTerm(ctx, fmt.Errorf("%w: %s: %w", ErrLeadershipLost, reasonPostAcquireFailed, err), reasonPostAcquireFailed, err.Error(), true)
	r.notBefore = r.e.clock.Now().Add(pause)
}

// postAcquireBackoff is the pause after the failures-th PostAcquire failure in a row: first (RetryPeriod,
// jittered), doubled after each further failure, at most MaxPostAcquireBackoff (or first, if longer).
func postAcquireBackoff(first time.Duration, failures int) time.Duration {
	pause := first
	for i := 1; i < failures && pause < MaxPostAcquireBackoff; i++ {
		pause *= 2
	}
	return max(first, min(pause, MaxPostAcquireBackoff))
}

// startLeading hands the term over: once no other elector of the process leads the Lease
// (takeLeadership), the term begins leading and OnStartedLeading runs, in a goroutine of their own; the
// loop goes on renewing meanwhile.
func (r *runner) startLeading() {
	t := r.term
	t.handedOver = true
	r.post = nil
	r.postFailures = 0
	key, keyed := leadershipKeyOf(r.cfg().Client, r.e.lease.Namespace, r.e.lease.Name)
	f := r.cfg().OnStartedLeading
	go func() {
		defer close(t.done)
		giveBack := func() {}
		if keyed {
			releaseTimeout := r.cfg().ReleaseTimeout
			endsBy := func() time.Time { return t.getDeadline().Add(releaseTimeout) }
			g, outlasted, ok := takeLeadership(t.ctx, r.e.clock, key, endsBy)
			if !ok {
				return
			}
			if outlasted != nil {
				r.logger().Info("Leading beside another leadership of this Lease in this process, which outlasted its safe-work deadline and releaseTimeout: it is of another cluster reached through the same address, or its OnStartedLeading ignores its context",
					"epoch", t.token.Epoch, "address", key.server, "outlastedBy", outlasted.endsBy())
			}
			giveBack = g
		}
		if !t.begin(giveBack, func() { r.e.metrics.leases.leading(r.e.lease.String(), 1) }) {
			giveBack()
			return
		}
		r.logger().Info("Started leading", "epoch", t.token.Epoch)
		if f != nil {
			f(t.ctx, t.token)
		}
	}()
}

// renew extends the Lease by compare-and-swap on this holder's last write; no read precedes it.
func (r *runner) renew(ctx context.Context, sent, stepAt time.Time) {
	cfg := r.cfg()
	l := renewalOf(r.held, sent, cfg.LeaseDuration)
	rctx, cancel := context.WithTimeout(ctx, stepAt.Sub(sent))
	res, err := r.leases.renew(rctx, l, r.term.token.FieldManager())
	if apierrors.IsConflict(err) {
		// Another write of the Lease came between (a label, an annotation: anyone's with RBAC on Leases).
		// Renew on the term instead of the resourceVersion: the apiserver applies the patch to the Lease as
		// it is, retrying its own conflicts, only while it names this holder at this epoch.
		if got, perr := r.renewOnTerm(rctx, l); perr == nil {
			res, err = got, nil
		}
	}
	cancel()
	switch {
	case err == nil:
		answered := r.e.clock.Now()
		r.noteRenewal(answered.Sub(sent))
		r.held = res
		r.lastSent = sent
		r.nextRenew = nextRenewalAt(answered, cfg.RetryPeriod)
		r.obs.set(res)
		r.term.extend(safeDeadline(sent, cfg.safeWindow()))
	case apierrors.IsNotFound(err):
		r.stepDown(ctx, reasonLeaseDeleted, "the Lease was deleted")
	case apierrors.IsConflict(err):
		got := r.reread(ctx)
		switch {
		case got == nil:
			r.nextRenew = r.e.clock.Now().Add(r.e.retryPause())
		case holder(got) != cfg.Identity:
			r.stepDown(ctx, reasonHolderChanged, fmt.Sprintf("the Lease now names holder %q", holder(got)))
		default:
			if epoch, perr := parseEpoch(got); perr != nil || epoch != r.term.token.Epoch {
				r.stepDown(ctx, reasonEpochChanged, fmt.Sprintf("the Lease now carries epoch %q, not %d", got.Annotations[protocol.EpochAnnotation], r.term.token.Epoch))
				return
			}
			r.held = got // another field was edited: renew on top of it now
			r.nextRenew = r.e.clock.Now()
		}
	default:
		if ctx.Err() != nil {
			return
		}
		r.logger().Error(err, "Cannot renew the Lease; retrying", "epoch", r.term.token.Epoch, "stepDownIn", stepAt.Sub(r.e.clock.Now()))
		r.nextRenew = r.e.clock.Now().Add(r.e.retryPause())
	}
}

// noteRenewal records a successful renewal's latency, from send to answer. A slow one (slowRenewal) is
// counted, and logged with the numbers when the renewals turn slow, before a Lease is lost to it.
func (r *runner) noteRenewal(latency time.Duration) {
	r.e.metrics.renew.Observe(latency.Seconds())
	cfg := r.cfg()
	slow := slowRenewal(latency, cfg.RenewDeadline, cfg.RetryPeriod)
	if slow {
		r.e.metrics.slowRenewals.Inc()
		if !r.slow {
			r.logger().Info("Renewals are slow: the client's rate limit or the apiserver does not keep up with this process's renewals, and the Lease is lost if a renewal takes longer than renewDeadline - retryPeriod",
				"epoch", r.term.token.Epoch, "renewal", latency, "renewDeadline", cfg.RenewDeadline, "retryPeriod", cfg.RetryPeriod)
		}
	}
	r.slow = slow
}

// renewOnTerm writes l's renewal (renewTime, leaseDurationSeconds) with a JSON patch that tests the
// holder and the epoch first: it is applied to the Lease as stored whatever else changed, and refused if
// another holder or another epoch is there. The conflict a write of another field causes an update cannot
// recur, so a storm of such writes cannot make the renewal miss RenewDeadline.
func (r *runner) renewOnTerm(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	return r.patchOnTerm(ctx, r.term.token, l)
}

// patchOnTerm writes l's holder, renewTime and leaseDurationSeconds (a renewal's or a release's) with a
// JSON patch that first tests that the stored Lease names tok's holder at tok's epoch, presenting tok.
func (r *runner) patchOnTerm(ctx context.Context, tok Token, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/spec/holderIdentity", "value": tok.Holder},
		{"op": "test", "path": "/metadata/annotations/" + jsonPointerEscape(protocol.EpochAnnotation), "value": strconv.FormatInt(tok.Epoch, 10)},
		{"op": "add", "path": "/spec/holderIdentity", "value": l.Spec.HolderIdentity},
		{"op": "add", "path": "/spec/renewTime", "value": l.Spec.RenewTime},
		{"op": "add", "path": "/spec/leaseDurationSeconds", "value": l.Spec.LeaseDurationSeconds},
	})
	if err != nil {
		return nil, err
	}
	return r.leases.patch(ctx, l.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: tok.FieldManager()})
}

// jsonPointerEscape escapes a key for a JSON pointer (RFC 6901).
func jsonPointerEscape(key string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// reread reads the Lease after a conflict and records what it saw; nil if absent or unreadable. The read is bounded by RenewDeadline, as every request of the elector.
func (r *runner) reread(ctx context.Context) *coordinationv1.Lease {
	ctx, cancel := context.WithTimeout(ctx, r.cfg().RenewDeadline)
	defer cancel()
	l, err := r.leases.get(ctx, r.e.lease.Name)
	switch {
	case apierrors.IsNotFound(err):
		r.obs.deleted("")
		return nil
	case err != nil:
		if ctx.Err() == nil {
			r.logger().Error(err, "Cannot read the Lease")
		}
		return nil
	}
	r.obs.set(l)
	return l
}

func (r *runner) retryLater(ctx context.Context, err error, msg string) {
	if ctx.Err() != nil {
		return
	}
	pause := r.e.retryPause()
	r.logger().Error(err, msg, "retryIn", pause)
	r.notBefore = r.e.clock.Now().Add(pause)
}

// stepDown ends the leadership involuntarily.
func (r *runner) stepDown(ctx context.Context, reason, detail string) {
	taken := reason == reasonHolderChanged || reason == reasonEpochChanged || reason == reasonLeaseDeleted
	cause := &lostError{msg: fmt.Sprintf("%v: %s: %s", ErrLeadershipLost, reason, detail), taken: taken}
	r.endTerm(ctx, cause, reason, detail, false)
}

// shutdown ends the leadership because Run's context ended, releasing the Lease unless ReleaseOnCancel is
// false.
func (r *runner) shutdown(ctx context.Context) {
	if r.term == nil {
		return
	}
	r.endTerm(ctx, ErrReleased, "", "", r.cfg().releaseOnCancel())
}

// endTerm ends the current term in the documented order: cancel the leadership context (IsLeader is false
// from here), wait up to ReleaseTimeout for OnStartedLeading to return, release if asked (one CAS write),
// then record and call OnStoppedLeading. reason is "" for a voluntary end.
func (r *runner) endTerm(ctx context.Context, cause error, reason, detail string, release bool) {
	t := r.term
	t.cancel(cause)
	r.e.setTerm(nil)
	r.term = nil
	r.post = nil
	if t.handedOver {
		// The leadership context is cancelled: the term can no longer begin. Wait for it to have begun
		// and OnStartedLeading to return, or for it not to begin.
		timer := r.e.clock.NewTimer(r.cfg().ReleaseTimeout)
		select {
		case <-t.done:
		case <-timer.C():
			r.logger().Info("OnStartedLeading did not return within releaseTimeout; continuing", "releaseTimeout", r.cfg().ReleaseTimeout)
		}
		timer.Stop()
	}
	leading := t.isLeading()
	if leading {
		r.e.metrics.leases.leading(r.e.lease.String(), -1)
	}
	t.giveBackLeadership()
	log := r.logger().WithValues("epoch", t.token.Epoch)
	if reason != "" {
		r.e.metrics.lost.WithLabelValues(r.e.lease.String(), reason).Inc()
		r.rec.Eventf(r.held, nil, corev1.EventTypeWarning, "LeadershipLost", "Lead", "%s", note("%s lost epoch %d: %s (%s)", t.token.Holder, t.token.Epoch, reason, detail))
		log.Info("Lost leadership", "reason", reason, "detail", detail)
	}
	if release && r.release(ctx, t) {
		r.rec.Eventf(r.held, nil, corev1.EventTypeNormal, "Released", "Release", "%s released epoch %d", t.token.Holder, t.token.Epoch)
		log.Info("Released the Lease")
	}
	if leading {
		if f := r.cfg().OnStoppedLeading; f != nil {
			f()
		}
	}
}

// release clears the holder in one CAS write on this holder's last write, and on a conflict (another
// field written meanwhile) with patchOnTerm: only while the Lease still names this holder at this epoch.
func (r *runner) release(ctx context.Context, t *term) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg().RenewDeadline)
	defer cancel()
	l := r.held.DeepCopy()
	applyRelease(l, r.e.clock.Now())
	res, err := r.leases.update(rctx, l, metav1.UpdateOptions{FieldManager: t.token.FieldManager()})
	if apierrors.IsConflict(err) {
		// Another write of the Lease came between (a label, an annotation: anyone's with RBAC on Leases):
		// release on the term, as renewOnTerm renews, so that a storm of such writes cannot keep the Lease
		// held until it expires.
		res, err = r.patchOnTerm(rctx, t.token, l)
	}
	switch {
	case err == nil:
		r.held = res
		r.obs.set(res)
		return true
	case apierrors.IsInvalid(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		return false // another holder, another epoch, or no Lease: nothing of this term's to release
	default:
		r.logger().Error(err, "Cannot release the Lease", "epoch", t.token.Epoch)
		return false
	}
}
