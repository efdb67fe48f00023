package webhook

import (
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// renewals remembers, per Lease, the last renewal a webhook read and when (on the webhook's clock) it first
// read it, so that the rule can time a holder's lease from what the webhook observed rather than from the
// holder's clock (admission.Lease.ObservedRenewal). The first reading of a Lease observes no renewal: the webhook
// cannot tell when that renewTime was written.
type renewals struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]renewal
}

// renewal is one Lease's state as last read: its holder, epoch and renewTime at resourceVersion, and when
// a change of them was first read (zero for the first reading).
type renewal struct {
	holder, epoch, renewTime string
	resourceVersion          uint64
	at                       time.Time
	duration                 time.Duration
}

// maxRenewals bounds the remembered Leases; beyond it, renewals whose lease has run out are forgotten.
const maxRenewals = 4096

// observe records l (read from src at now; nil if it does not exist) and returns when its current renewal
// was first read, zero if this reading is the first of the Lease or shows no change since the first. The
// copy lags and may show a Lease older than one already read: a reading changes what is recorded only if
// its resourceVersion (an etcd revision) is above the recorded one, and a reading of an older state
// observed no renewal, unless it is of the same term (holder and epoch), whose later renewal was read.
func (r *renewals) observe(l *coordinationv1.Lease, now time.Time) time.Time {
	if l == nil {
		return time.Time{}
	}
	cur := renewal{epoch: l.Annotations[protocol.EpochAnnotation]}
	if l.Spec.HolderIdentity != nil {
		cur.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		cur.renewTime = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	if l.Spec.LeaseDurationSeconds != nil {
		cur.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	rv, err := strconv.ParseUint(l.ResourceVersion, 10, 64)
	if err != nil {
		rv = 0
	}
	cur.resourceVersion = rv
	key := types.NamespacedName{Namespace: l.Namespace, Name: l.Name}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.NamespacedName]renewal{}
	}
	prev, ok := r.seen[key]
	same := ok && prev.holder == cur.holder && prev.epoch == cur.epoch && prev.renewTime == cur.renewTime
	switch {
	case ok && rv <= prev.resourceVersion:
		if prev.holder == cur.holder && prev.epoch == cur.epoch {
			// An older reading of the term whose later renewal was first read at prev.at (a quorum read
			// taken just before a renewal, decided after the copy delivered it): the holder was live then.
			return prev.at
		}
		return time.Time{}
	case same:
		cur.at = prev.at
	case ok:
		cur.at = now
	case len(r.seen) >= maxRenewals:
		r.forget(now)
	}
	r.seen[key] = cur
	return cur.at
}

// forget drops the Leases whose observed renewal, if any, has run out at now.
func (r *renewals) forget(now time.Time) {
	for k, v := range r.seen {
		if !now.Before(v.at.Add(v.duration)) {
			delete(r.seen, k)
		}
	}
}

// parse reads l for the rule, as read from src at now, with the renewal the webhook observed.
func (r *renewals) parse(l *coordinationv1.Lease, src admission.Source, now time.Time) *admission.Lease {
	v := admission.ParseLease(l, src)
	v.ObservedRenewal = r.observe(l, now)
	return v
}
