package elector

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The timing rules, as pure functions of monotonic clock readings so that they can be table-tested.

// safeDeadline is the end of a holder's authority: sent + window, where sent is the monotonic time at which
// the last successful acquire or renew request was sent (read before sending, not when the reply came) and
// window is LeaseDuration*(1-MaxClockDrift) - SafetyMargin.
func safeDeadline(sent time.Time, window time.Duration) time.Time { return sent.Add(window) }

// renewStepDownAt is when a leader that has not renewed steps down: RenewDeadline after the send time of
// its last successful write.
func renewStepDownAt(lastSent time.Time, renewDeadline time.Duration) time.Time {
	return lastSent.Add(renewDeadline)
}

// nextRenewalAt is when a leader sends its next renewal: RetryPeriod after the answer to its last
// successful acquire or renew, as client-go's leaderelection does. Counted from the send instead, renewals
// queued behind the client's own rate limiter would be due again the moment they are answered, and a
// process whose client allows its renewals and little more would queue them until it lost its Leases. The
// safe-work deadline and the step-down still count from the send.
func nextRenewalAt(answered time.Time, retryPeriod time.Duration) time.Time {
	return answered.Add(retryPeriod)
}

// slowRenewal reports whether a successful renewal took so long, from send to answer, that one more as
// slow would leave the leader less than half of its margin (RenewDeadline - RetryPeriod) before it steps
// down: the client's queue or the apiserver no longer keeps up with this process's renewals, and a Lease
// will be lost if it gets worse. With the defaults (10 s, 2 s): 4 s.
func slowRenewal(latency, renewDeadline, retryPeriod time.Duration) bool {
	return 2*latency > renewDeadline-retryPeriod
}

// retryJitter stretches the pause after a failed request: RetryPeriod * [1, 1+retryJitter). Electors that
// failed together (an apiserver outage, 100 electors in one process) then do not retry in lockstep.
// Regular renewals (every RetryPeriod exactly) and takeovers (at release or expiry, arbitrated by CAS) are
// not jittered: that would only add latency.
const retryJitter = 0.2

// jittered returns d stretched by factor*r, with r in [0, 1) drawn by the caller.
func jittered(d time.Duration, factor, r float64) time.Duration {
	return d + time.Duration(factor*r*float64(d))
}

// observation is what a candidate last saw of its Lease: the object (nil if the Lease does not exist) and
// the candidate's own monotonic clock reading when it first saw that version.
type observation struct {
	lease *coordinationv1.Lease
	at    time.Time
}

// takeover says when a standby may acquire, given its last observation.
type takeover struct {
	// at is the earliest time to acquire; at <= now means at once.
	at time.Time
	// why explains the decision for logs: "absent", "released", "expiry", "malformed".
	why string
	// detail gives the malformed field, if any.
	detail string
}

// takeoverTime is the standby rule: a missing or released Lease may be acquired at once; a held one at
// observation time + leaseDurationSeconds (+ lockDelay, since the holder did not release it). The expiry is
// measured from when this candidate observed the current version, on its own monotonic clock, never by
// comparing renewTime with a wall clock. A held Lease with a missing or non-positive leaseDurationSeconds
// is treated as expired (plus lockDelay).
func takeoverTime(o observation, lockDelay time.Duration) takeover {
	l := o.lease
	if l == nil {
		return takeover{at: o.at, why: "absent"}
	}
	if holder(l) == "" {
		return takeover{at: o.at, why: "released"}
	}
	if l.Spec.LeaseDurationSeconds == nil {
		return takeover{at: o.at.Add(lockDelay), why: "malformed", detail: "spec.leaseDurationSeconds is missing"}
	}
	if s := *l.Spec.LeaseDurationSeconds; s <= 0 {
		return takeover{at: o.at.Add(lockDelay), why: "malformed", detail: "spec.leaseDurationSeconds is not positive"}
	}
	d := time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	return takeover{at: o.at.Add(d + lockDelay), why: "expiry"}
}

// holder returns the Lease's holder identity ("" if none).
func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// leaseSeconds renders a duration as the Lease's leaseDurationSeconds, rounded up to a whole second so
// that standbys never wait less than the configured duration.
func leaseSeconds(d time.Duration) int32 {
	s := int32(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
