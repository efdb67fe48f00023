package elector

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

type leaseClient = coordinationv1client.LeaseInterface

// Elector competes for one Lease and, while it holds it, hands a fencing Token to user code. Create it with
// New and call Run.
type Elector struct {
	cfg   Config
	lease types.NamespacedName
	clock clock.WithTicker

	log        logr.Logger
	logSet     bool
	registerer prometheus.Registerer
	recorder   events.EventRecorder
	metrics    *metrics

	running atomic.Bool
	// rand draws the retry jitter, in [0, 1).
	rand func() float64

	mu  sync.Mutex
	cur *term // the current term, nil when not holding the Lease
}

// New validates cfg (after defaulting its zero values) and returns an Elector.
func New(cfg Config, opts ...Option) (*Elector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	e := &Elector{
		cfg:   cfg,
		lease: types.NamespacedName{Namespace: cfg.Namespace, Name: cfg.Name},
		clock: clock.RealClock{},
		rand:  rand.Float64,
	}
	for _, opt := range opts {
		opt(e)
	}
	m, err := newMetrics(e.registerer)
	if err != nil {
		return nil, fmt.Errorf("elector: registering metrics: %w", err)
	}
	e.metrics = m
	return e, nil
}

// Identity is this candidate's holder identity.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Token returns the current leadership's token, or the zero Token when not leading or past the safe-work
// deadline.
func (e *Elector) Token() Token {
	if t := e.validTerm(); t != nil {
		return t.token
	}
	return Token{}
}

// Deadline returns the current safe-work deadline (a reading of the elector's clock), or the zero time when
// not leading or past it. It moves forward with each renewal.
func (e *Elector) Deadline() time.Time {
	if t := e.validTerm(); t != nil {
		return t.getDeadline()
	}
	return time.Time{}
}

// IsLeader reports whether the elector leads now: false past the safe-work deadline, even if the
// leadership context has not been cancelled yet.
func (e *Elector) IsLeader() bool { return e.validTerm() != nil }

func (e *Elector) validTerm() *term {
	e.mu.Lock()
	t := e.cur
	e.mu.Unlock()
	if t == nil || !t.valid(e.clock.Now()) {
		return nil
	}
	return t
}

// retryPause is how long to wait after a failed request: RetryPeriod, jittered.
func (e *Elector) retryPause() time.Duration {
	return jittered(e.cfg.RetryPeriod, retryJitter, e.rand())
}

func (e *Elector) setTerm(t *term) {
	e.mu.Lock()
	e.cur = t
	e.mu.Unlock()
}

// Run competes for the Lease until ctx is done: it acquires, leads, and competes again after losing. When
// ctx ends while leading, it ends the leadership context, waits (up to ReleaseTimeout) for
// OnStartedLeading to return and, unless ReleaseOnCancel is false, releases the Lease. It returns nil when
// ctx ends, or an error if Run is already running.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("elector: Run is already running")
	}
	defer e.running.Store(false)
	r, stop := e.start(ctx)
	if r == nil {
		return nil
	}
	defer stop()
	r.loop(ctx)
	return nil
}

// start prepares a Run: the logger, the event recorder, the acquirer's user name and the watch of the
// Lease. It returns the runner and what to stop when it is done, or nil if ctx ended first. It is a
// function of its own so that Run's frame, which stays on the stack of a parked elector, is small: a
// process leading 1,000 Leases keeps 1,000 of those stacks (runner.loop).
func (e *Elector) start(ctx context.Context) (*runner, func()) {
	base := e.log
	if !e.logSet {
		base = klog.FromContext(ctx)
	}
	log := withLease(base, e)

	rec := e.recorder
	done := func() {}
	if rec == nil {
		rec, done = defaultRecorder(e.cfg.Client)
	}

	acquirer, ok := e.whoAmI(ctx, log)
	if !ok {
		done()
		return nil, nil
	}
	obs := newObserver(e.lease.Name, e.clock)
	leases, stopWatch, ok := watchLease(ctx, e.cfg.Client, e.lease.Namespace, obs, log)
	if !ok {
		done()
		return nil, nil
	}
	r := &runner{e: e, log: base, rec: rec, leases: leaseRequests{leases: leases, rest: restOf(e.cfg.Client.CoordinationV1()), obs: obs}, obs: obs, acquirer: acquirer}
	return r, func() {
		stopWatch()
		done()
	}
}

// withLease adds the Lease and the identity to log.
func withLease(log logr.Logger, e *Elector) logr.Logger {
	return log.WithValues("lease", e.lease.String(), "identity", e.cfg.Identity)
}

// whoAmI learns the authenticated user name with a SelfSubjectReview, retrying every RetryPeriod. The
// electors of a process that start together on one client send one review between them (reviews).
func (e *Elector) whoAmI(ctx context.Context, log logr.Logger) (string, bool) {
	for {
		name, err := e.review(ctx)
		if err == nil {
			log.V(1).Info("Learned the acquirer user name", "acquirer", name)
			return name, true
		}
		if ctx.Err() != nil {
			return "", false
		}
		log.Error(err, "Cannot learn the acquirer user name; retrying", "retryPeriod", e.cfg.RetryPeriod)
		t := e.clock.NewTimer(e.retryPause())
		select {
		case <-ctx.Done():
			t.Stop()
			return "", false
		case <-t.C():
		}
	}
}

// reviews shares a SelfSubjectReview in flight among the electors of one client that ask at the same time
// (a process starting 1,000 electors sends one, not 1,000), keyed by the client's address.
var reviews singleflight.Group

// review sends a SelfSubjectReview through the elector's client, or waits for the one in flight on it, and
// returns the user name. The request is bounded by RenewDeadline, as every request of the elector, and
// does not end with one caller's context.
func (e *Elector) review(ctx context.Context) (string, error) {
	cs := e.cfg.Client
	send := func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
		defer cancel()
		ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(rctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		if ssr.Status.UserInfo.Username == "" {
			return "", errors.New("the SelfSubjectReview returned no user name")
		}
		return ssr.Status.UserInfo.Username, nil
	}
	if reflect.TypeOf(cs).Kind() != reflect.Pointer {
		name, err := send()
		return name.(string), err
	}
	select {
	case res := <-reviews.DoChan(fmt.Sprintf("%p", cs), send):
		return res.Val.(string), res.Err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
