package elector

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Lost reasons, the values of leadership_lost_total's reason label.
const (
	reasonRenewDeadline      = "renew_deadline"       // could not renew within RenewDeadline
	reasonDeadlinePassed     = "deadline_passed"      // the safe-work deadline passed before a renewal
	reasonHolderChanged      = "holder_changed"       // the Lease shows another holder
	reasonEpochChanged       = "epoch_changed"        // the Lease shows another epoch (edited by hand)
	reasonLeaseDeleted       = "lease_deleted"        // the Lease was deleted
	reasonFencedLabelRemoved = "fenced_label_removed" // break glass removed the Lease's fenced label
	reasonPostAcquireFailed  = "post_acquire_failed"  // Config.PostAcquire's raise returned an error
)

// metrics are the elector's collectors. They are registered once per registerer and shared by every
// elector in the process. The series of one Lease (is_leader, epoch, acquisitions) carry the lease label
// ("namespace/name") and are kept as plain numbers per Lease (leaseSeries); the renewal metrics are the
// process's; leadership_lost_total has a series per Lease and reason that lost one.
type metrics struct {
	leases       *leaseSeries
	renew        prometheus.Histogram
	slowRenewals prometheus.Counter
	lost         *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leases: newLeaseSeries(),
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
	if m.leases, err = register(reg, m.leases); err != nil {
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

// leaseSeries is a collector of the series of each Lease the electors of a process have acquired:
// fencekit_elector_is_leader, fencekit_elector_epoch and fencekit_elector_acquisitions_total. It keeps
// three numbers per Lease and makes the series when scraped: a gauge or counter vector keeps an object per
// series, about 1 KiB a Lease for these three, which a replica leading 10,000 Leases would keep 10,000
// times.
type leaseSeries struct {
	isLeader, epoch, acquisitions *prometheus.Desc

	mu     sync.Mutex
	leases map[string]*leaseState // by lease label
}

// leaseState is one Lease's numbers.
type leaseState struct {
	leading      int     // electors of the process leading the Lease
	epoch        float64 // the epoch of the last acquisition
	acquisitions float64
}

func newLeaseSeries() *leaseSeries {
	lease := []string{"lease"}
	return &leaseSeries{
		isLeader: prometheus.NewDesc("fencekit_elector_is_leader",
			"Number of electors in this process leading the Lease (1 while leading, 0 otherwise).", lease, nil),
		epoch: prometheus.NewDesc("fencekit_elector_epoch",
			"The fencing epoch of the last acquisition of the Lease by this process.", lease, nil),
		acquisitions: prometheus.NewDesc("fencekit_elector_acquisitions_total",
			"Acquisitions of the Lease by this process.", lease, nil),
		leases: map[string]*leaseState{},
	}
}

// acquired records an acquisition of lease at epoch.
func (s *leaseSeries) acquired(lease string, epoch int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.leases[lease]
	if st == nil {
		st = &leaseState{}
		s.leases[lease] = st
	}
	st.acquisitions++
	st.epoch = float64(epoch)
}

// leading records an elector of lease starting (delta 1) or ending (-1) a leadership; lease was acquired.
func (s *leaseSeries) leading(lease string, delta int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.leases[lease]; st != nil {
		st.leading += delta
	}
}

func (s *leaseSeries) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.isLeader
	ch <- s.epoch
	ch <- s.acquisitions
}

func (s *leaseSeries) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for lease, st := range s.leases {
		ch <- prometheus.MustNewConstMetric(s.isLeader, prometheus.GaugeValue, float64(st.leading), lease)
		ch <- prometheus.MustNewConstMetric(s.epoch, prometheus.GaugeValue, st.epoch, lease)
		ch <- prometheus.MustNewConstMetric(s.acquisitions, prometheus.CounterValue, st.acquisitions, lease)
	}
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
