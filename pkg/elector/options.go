package elector

import (
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
)

// Option customises an Elector.
type Option func(*Elector)

// WithClock sets the clock every timing decision reads (default: the real clock). Tests pass a
// k8s.io/utils/clock/testing.FakeClock.
func WithClock(c clock.WithTicker) Option { return func(e *Elector) { e.clock = c } }

// WithMetricsRegisterer registers the fencekit_elector_* metrics with r: prometheus.DefaultRegisterer for a
// client-go program serving promhttp.Handler(), controller-runtime's metrics.Registry in a manager (package
// managed passes it). Default: none, the metrics are kept but registered nowhere (pkg/elector chooses no
// registry for its caller). Registering the same collectors from many electors is safe: they share them.
func WithMetricsRegisterer(r prometheus.Registerer) Option {
	return func(e *Elector) { e.registerer = r }
}

// WithEventRecorder sets the recorder (events.k8s.io/v1, as controller-runtime's mgr.GetEventRecorder
// returns) for the Events on the Lease (default: a poster on Config.Client, shared by the electors running
// on that client in this process, and stopped when the last one's Run returns).
func WithEventRecorder(r events.EventRecorder) Option { return func(e *Elector) { e.recorder = r } }

// WithLogger sets the logger (default: the logger in Run's context, else klog's global logger). In a
// controller-runtime manager pass the manager's (mgr.GetLogger()): the manager starts runnables with a
// context that carries none.
func WithLogger(l logr.Logger) Option { return func(e *Elector) { e.log = l; e.logSet = true } }
