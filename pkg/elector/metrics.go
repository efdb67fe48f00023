package elector

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Lost reasons, the values of leadership_lost_total's reason label.
const (
	reasonRenewDeadline     = "renew_deadline"      // could not renew within RenewDeadline
	reasonDeadlinePassed    = "deadline_passed"     // the safe-work deadline passed before a renewal
	reasonHolderChanged     = "holder_changed"      // the Lease shows another holder
	reasonEpochChanged      = "epoch_changed"       // the Lease shows another epoch (edited by hand)
	reasonLeaseDeleted      = "lease_deleted"       // the Lease was deleted
	reasonPostAcquireFailed = "post_acquire_failed" // Config.PostAcquire's raise returned an error
)

// metrics are the elector's collectors. They are registered once per registerer and shared by every
// elector in the process, told apart by the lease label ("namespace/name"), the renewal metrics excepted.
type metrics struct {
	isLeader     *prometheus.GaugeVec
	epoch        *prometheus.GaugeVec
	acquisitions *prometheus.CounterVec
	renew        prometheus.Histogram
	slowRenewals prometheus.Counter
	lost         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		isLeader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencekit_elector_is_leader",
			Help: "Number of electors in this process leading the Lease (1 while leading, 0 otherwise).",
		}, []string{"lease"}),
		epoch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fencekit_elector_epoch",
			Help: "The fencing epoch of the last acquisition of the Lease by this process.",
		}, []string{"lease"}),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_elector_acquisitions_total",
			Help: "Acquisitions of the Lease by this process.",
		}, []string{"lease"}),
		// The renewal metrics are the process's, not one Lease's: how long renewals take is the client's and
		// the apiserver's doing, and a label per Lease would make a replica leading 10,000 Leases export
		// 150,000 histogram series.
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fencekit_elector_renew_duration_seconds",
			Help:    "Latency of successful Lease renewals by the electors of this process, from send to reply.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		slowRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "fencekit_elector_slow_renewals_total",
			Help: "Successful Lease renewals by the electors of this process that took more than half of renewDeadline - retryPeriod from send to reply: the client's rate limit or the apiserver does not keep up, and a Lease is lost if it gets worse.",
		}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencekit_elector_leadership_lost_total",
			Help: "Leaderships of the Lease that ended involuntarily, by reason.",
		}, []string{"lease", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.isLeader, err = register(reg, m.isLeader)
	if err != nil {
		return nil, err
	}
	if m.epoch, err = register(reg, m.epoch); err != nil {
		return nil, err
	}
	if m.acquisitions, err = register(reg, m.acquisitions); err != nil {
		return nil, err
	}
	if m.renew, err = register(reg, m.renew); err != nil {
		return nil, err
	}
	if m.slowRenewals, err = register(reg, m.slowRenewals); err != nil {
		return nil, err
	}
	if m.lost, err = register(reg, m.lost); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}
