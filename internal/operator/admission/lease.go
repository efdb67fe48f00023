package admission

import (
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// Source is where a Lease view was read.
type Source int

const (
	// Quorum is a read straight from etcd: it shows every acquisition that completed before it.
	Quorum Source = iota
	// Copy is the webhook's watch-fed copy: it lags arbitrarily and never goes back. It may only admit,
	// and only what fence-on-acquire makes safe (see copyMayAdmit).
	Copy
)

func (s Source) String() string {
	if s == Copy {
		return "copy"
	}
	return "quorum"
}

// Lease is what the rule needs of a Lease in the fencekit format, parsed once per request.
type Lease struct {
	Name   string
	Source Source
	// Missing says that the Lease does not exist (as seen from Source).
	Missing bool
	// Fenced is the label fencing.fencekit.io/fenced=true: only then does the Lease policy guard its epoch
	// and acquirer.
	Fenced bool
	// Epoch is the current epoch; EpochErr says why it could not be read (missing or malformed).
	Epoch    int64
	EpochErr string
	Holder   string
	Acquirer string
	// RenewTime and Duration are the holder's last renewal and lease duration; Duration <= 0 when missing.
	RenewTime time.Time
	Duration  time.Duration
	// ObservedRenewal is when the deciding webhook, on its own clock, saw this renewal (RenewTime as it
	// stands) replace an earlier one; zero if it has not. RenewTime is the holder's clock, which may be
	// behind the webhook's: a renewal the webhook watched happen keeps the Lease live for Duration from
	// then, as a standby elector times the renewals it observes (docs/design/elector.md).
	ObservedRenewal time.Time
	// Fences is the fence-on-acquire declaration (annotation fencing.fencekit.io/fences); a malformed one
	// declares nothing.
	Fences protocol.Fences
}

// ParseLease reads l (nil if it does not exist: Missing) as read from src. It never fails: what it cannot
// read is reported in EpochErr (the epoch), a zero Duration (treated as expired) or an empty declaration.
func ParseLease(l *coordinationv1.Lease, src Source) *Lease {
	if l == nil {
		return &Lease{Source: src, Missing: true}
	}
	v := &Lease{Name: l.Name, Source: src, Fenced: l.Labels[protocol.FencedLabel] == "true",
		Acquirer: l.Annotations[protocol.AcquirerAnnotation]}
	raw, ok := l.Annotations[protocol.EpochAnnotation]
	switch epoch, err := protocol.ParseEpoch(raw); {
	case !ok:
		v.EpochErr = "it has no " + protocol.EpochAnnotation + " annotation (no fencekit elector has acquired it)"
	case err != nil:
		v.EpochErr = "its " + protocol.EpochAnnotation + " annotation " + strconv.Quote(raw) + " is not an epoch >= 1"
	case epoch > protocol.MaxEpoch:
		v.EpochErr = "its " + protocol.EpochAnnotation + " annotation " + strconv.Quote(raw) + " is above the highest epoch " +
			strconv.FormatInt(protocol.MaxEpoch, 10) + " (no fencekit elector issues it)"
	default:
		v.Epoch = epoch
	}
	if l.Spec.HolderIdentity != nil {
		v.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		v.RenewTime = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		v.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if f, err := protocol.ParseFences(l.Annotations[protocol.FencesAnnotation]); err == nil {
		v.Fences = f
	}
	return v
}

// Live reports whether the Lease has a holder whose lease has not expired at now, at a valid epoch.
func (l *Lease) Live(now time.Time) bool {
	return l != nil && !l.Missing && l.EpochErr == "" && l.Holder != "" && l.Duration > 0 && !l.RenewTime.IsZero() &&
		!now.After(l.Expiry())
}

// Expiry is when the holder's lease ends: Duration after the later of its renewTime and the moment the
// webhook observed that renewal (ObservedRenewal). Either shows the holder renewed then; taking the later
// keeps a holder whose clock is behind the webhook's live (its writes admitted, others' deletes refused)
// for as long as its standbys, which time what they observe, let it lead.
func (l *Lease) Expiry() time.Time {
	from := l.RenewTime
	if l.ObservedRenewal.After(from) {
		from = l.ObservedRenewal
	}
	return from.Add(l.Duration)
}

// declares reports whether every acquisition of the Lease raises objects of class c before it hands out
// its token.
func (l *Lease) declares(c Class) bool {
	if c == FencedResource {
		return l.Fences.FencedResources
	}
	return l.Fences.Objects
}
