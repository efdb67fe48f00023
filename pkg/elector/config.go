package elector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// Defaults for the zero values of Config.
const (
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
	DefaultMaxClockDrift  = 0.01
	DefaultSafetyMargin   = 2 * time.Second
	DefaultReleaseTimeout = 5 * time.Second

	// MaxPostAcquireBackoff bounds the pause after PostAcquire failed several times in a row.
	MaxPostAcquireBackoff = time.Minute
)

// Config configures an Elector. Zero values take the documented defaults; New validates the result.
type Config struct {
	// Client talks to the apiserver: Leases (get, list, watch, create, update), Events (create, patch) and
	// SelfSubjectReviews (create).
	Client kubernetes.Interface

	// Namespace and Name name the coordination.k8s.io/v1 Lease. Both are required.
	Namespace, Name string

	// Identity is this candidate's holder identity. Default: $POD_NAME (else the hostname) plus "-" and a
	// random suffix, so that a restarted process is a new candidate.
	Identity string

	// LeaseDuration is how long standbys wait, measured on their own clock from when they observed the
	// holder's last renewal of the Lease, before taking it over from a holder that stopped renewing. Default 15s.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it steps down: it steps down when
	// RenewDeadline has passed since the send time of its last successful renewal. Default 10s.
	RenewDeadline time.Duration
	// RetryPeriod is the leader's renewal interval and the pause between failed attempts. Default 2s.
	RetryPeriod time.Duration

	// MaxClockDrift is d, the maximum rate at which two clocks may drift apart (0.01 = 1%), in [0, 1).
	// 0 means the default, 0.01.
	MaxClockDrift float64
	// SafetyMargin is subtracted from the safe-work window: the leader's authority ends at
	// sent + LeaseDuration*(1-MaxClockDrift) - SafetyMargin. 0 means the default, 2s.
	SafetyMargin time.Duration
	// LockDelay (Chubby's lock-delay) is added to the expiry of a Lease whose holder did not release it, so
	// that standbys wait this much longer after an involuntary expiry. Default 0.
	LockDelay time.Duration

	// ReleaseOnCancel clears the holder when Run's context is cancelled, so that a standby takes over at
	// once. nil means true.
	ReleaseOnCancel *bool
	// ReleaseTimeout bounds how long the elector waits for OnStartedLeading to return after the leadership
	// context is cancelled, before it releases (or re-competes). Default 5s.
	ReleaseTimeout time.Duration

	// PostAcquire, if set, runs after each acquisition and before OnStartedLeading, with a context that ends
	// with the leadership or after PostAcquireTimeout, and what it declares is written on the Lease
	// (annotation fencing.fencekit.io/fences) in every acquisition. Build it with pkg/fencing:
	// fencing.FenceOnAcquireForConfig raises every FencedResource bound to the Lease to the new epoch,
	// fencing.FenceObjectsOnAcquireForConfig every object a FencingPolicy binds to it, and each declares what
	// it raises, so that fencekit's admission decides a write that presents the Lease's current epoch, to a
	// resource or object of a declared kind still at that epoch, from its watch-fed copy of the Lease instead
	// of a quorum read of the Lease per write (docs/design/lease-reads.md). The
	// declaration outlives this elector: the Lease policy refuses any later acquisition that drops a declared
	// kind, so every later holder must fence it too. AcquireHook runs a hook of your own and declares
	// nothing. If the raise returns an error, leadership is not reported: the elector releases the Lease,
	// logs and counts it (lost reason "post_acquire_failed") and waits before competing again: RetryPeriod
	// after the first failure, doubled after each further one in a row, up to MaxPostAcquireBackoff (a
	// permanent error, such as the fence's missing RBAC, is then tried once a minute, each try at a new
	// epoch); a term that starts leading resets it.
	// The Lease is renewed while it runs; IsLeader is false and Token is zero until it has succeeded.
	// Default: nothing runs, nothing is declared, every fenced write reads the Lease from etcd.
	PostAcquire AcquireFence
	// PostAcquireTimeout bounds PostAcquire. Default: RenewDeadline. pkg/fencing's fences send 2 + N
	// requests for N bound resources (1 + M + N for N objects of M declared resources): build them with
	// fencing.FenceOnAcquireForConfig (or FenceObjectsOnAcquireForConfig), whose client has no
	// client-side rate limit; a client that keeps client-go's default of 5 QPS needs about 18 s for 100
	// resources, past the default 10 s.
	PostAcquireTimeout time.Duration

	// OnStartedLeading runs in its own goroutine when leadership starts. ctx is the leadership context: it
	// is cancelled the moment the safe-work deadline passes, leadership is lost, or it is released;
	// ctx.Deadline() reports the current safe-work deadline, which moves forward with each renewal. Within
	// one process it never runs beside another elector's OnStartedLeading for the same Lease (on a client
	// of the same apiserver address): leadership starts once the previous one has returned, or its
	// ReleaseTimeout has passed, waiting at most until the previous one's safe-work deadline plus its
	// ReleaseTimeout.
	OnStartedLeading func(ctx context.Context, t Token)
	// OnStoppedLeading runs after each leadership that OnStartedLeading was called for has ended (after
	// OnStartedLeading returned, or ReleaseTimeout passed).
	OnStoppedLeading func()
	// OnNewLeader runs when the elector observes a new holder or a new epoch, including its own. It runs on
	// the elector's loop: return quickly.
	OnNewLeader func(identity string, epoch int64)
}

// releaseOnCancel reports the effective ReleaseOnCancel.
func (c *Config) releaseOnCancel() bool { return c.ReleaseOnCancel == nil || *c.ReleaseOnCancel }

// safeWindow is LeaseDuration*(1-MaxClockDrift) - SafetyMargin: the safe-work deadline after the send time.
func (c *Config) safeWindow() time.Duration {
	return SafeWindow(c.LeaseDuration, c.MaxClockDrift, c.SafetyMargin)
}

// SafeWindow is T*(1-d) - margin, the length of a holder's authority after it sent its last successful
// acquire or renew request. With the defaults (15s, 0.01, 2s) it is 12.85s.
func SafeWindow(leaseDuration time.Duration, maxClockDrift float64, margin time.Duration) time.Duration {
	return time.Duration(float64(leaseDuration)*(1-maxClockDrift)) - margin
}

// withDefaults returns c with zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Identity == "" {
		c.Identity = defaultIdentity()
	}
	for _, d := range []struct {
		field *time.Duration
		value time.Duration
	}{
		{&c.LeaseDuration, DefaultLeaseDuration},
		{&c.RenewDeadline, DefaultRenewDeadline},
		{&c.RetryPeriod, DefaultRetryPeriod},
		{&c.SafetyMargin, DefaultSafetyMargin},
		{&c.ReleaseTimeout, DefaultReleaseTimeout},
	} {
		if *d.field == 0 {
			*d.field = d.value
		}
	}
	if c.MaxClockDrift == 0 {
		c.MaxClockDrift = DefaultMaxClockDrift
	}
	if c.PostAcquireTimeout == 0 {
		c.PostAcquireTimeout = c.RenewDeadline
	}
	return c
}

// validate checks a defaulted Config and returns every problem, each naming the numbers.
func (c *Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("client must be set"))
	}
	if c.Namespace == "" {
		errs = append(errs, errors.New("lease namespace must be set"))
	}
	if c.Name == "" {
		errs = append(errs, errors.New("lease name must be set"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"leaseDuration", c.LeaseDuration}, {"renewDeadline", c.RenewDeadline}, {"retryPeriod", c.RetryPeriod},
		{"releaseTimeout", c.ReleaseTimeout}, {"postAcquireTimeout", c.PostAcquireTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", d.name, d.v))
		}
	}
	if f := c.PostAcquire; f.fences != (protocol.Fences{}) && len(f.raises) == 0 {
		errs = append(errs, fmt.Errorf("postAcquire declares %q but has no hook to raise them", f.fences.String()))
	}
	if c.LockDelay < 0 {
		errs = append(errs, fmt.Errorf("lockDelay must not be negative, got %v", c.LockDelay))
	}
	if c.SafetyMargin < 0 {
		errs = append(errs, fmt.Errorf("safetyMargin must not be negative, got %v", c.SafetyMargin))
	}
	if c.MaxClockDrift < 0 || c.MaxClockDrift >= 1 {
		errs = append(errs, fmt.Errorf("maxClockDrift must be in [0, 1), got %v", c.MaxClockDrift))
	}
	if c.LeaseDuration <= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("leaseDuration (%v) must be greater than renewDeadline (%v)", c.LeaseDuration, c.RenewDeadline))
	}
	if c.RenewDeadline <= c.RetryPeriod {
		errs = append(errs, fmt.Errorf("renewDeadline (%v) must be greater than retryPeriod (%v)", c.RenewDeadline, c.RetryPeriod))
	}
	if w := c.safeWindow(); w <= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = %v*(1-%v)-%v = %v must be greater than renewDeadline (%v)",
			c.LeaseDuration, c.MaxClockDrift, c.SafetyMargin, w, c.RenewDeadline))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("elector: invalid config: %w", errors.Join(errs...))
}

func defaultIdentity() string {
	base := os.Getenv("POD_NAME")
	if base == "" {
		base, _ = os.Hostname()
	}
	if base == "" {
		base = "elector"
	}
	return base + "-" + utilrand.String(5)
}
