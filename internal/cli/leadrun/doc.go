// Package leadrun runs a command only while a fencekit elector leads a Lease, for workloads that are not
// written in Go: `fencekit run -- CMD ARGS...` and the token sidecar `fencekit elect --serve`.
//
// What it guarantees: CMD is started only after an acquisition (and after fence-on-acquire, when
// configured), with the acquisition's token in its environment; its process tree is sent SIGTERM the
// moment the elector's safe-work deadline passes or leadership is lost, and SIGKILL after a grace period,
// and what it leaves running when it exits is stopped the same way before the Lease is released. What it
// cannot guarantee is that CMD has stopped writing by the time another holder takes over: a paused CMD
// (or a paused fencekit) cannot be signalled in time. CMD must present FENCEKIT_EPOCH on every write, and
// the target must refuse a stale one: that is what makes the writes safe, not the signals.
package leadrun
