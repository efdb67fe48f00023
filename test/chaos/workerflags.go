package chaos

import (
	"flag"
	"time"
)

// WorkerFlags is the command line of a worker process (test/chaos/worker): the harness writes it with
// Args, the worker reads it with RegisterFlags.
type WorkerFlags struct {
	// Mode is fenced (pkg/elector and a FencedResource) or unfenced (client-go's leaderelection and a
	// ConfigMap).
	Mode string
	// Namespace, Lease and Target name the Lease and the FencedResource (or ConfigMap) it writes.
	Namespace, Lease, Target string
	// Identity is its holder identity and its process name in the history; User is the user its
	// kubeconfig authenticates as, recorded in the history.
	Identity, User string
	// History is its history file (JSON lines, appended to); ClockFile holds the rate of its elector's
	// clock, read on SIGUSR2 (F8).
	History, ClockFile string
	Timings
	// RequestTimeout bounds one write or read.
	RequestTimeout time.Duration
}

// workerFlag is one flag of the worker's command line and the field of WorkerFlags it sets: s or d.
type workerFlag struct {
	name, usage string
	s           *string
	d           *time.Duration
}

func (f *WorkerFlags) flags() []workerFlag {
	return []workerFlag{
		{name: "mode", usage: "fenced (pkg/elector + FencedResource) or unfenced (client-go leaderelection + ConfigMap).", s: &f.Mode},
		{name: "namespace", usage: "Namespace of the Lease and the target.", s: &f.Namespace},
		{name: "lease", usage: "Lease to elect on.", s: &f.Lease},
		{name: "target", usage: "FencedResource (or ConfigMap) to write.", s: &f.Target},
		{name: "identity", usage: "Holder identity; also the process name in the history.", s: &f.Identity},
		{name: "user", usage: "The user the kubeconfig authenticates as (recorded in the history).", s: &f.User},
		{name: "history", usage: "History file (JSON lines), appended to.", s: &f.History},
		{name: "clock-file", usage: "File holding the rate of the elector's clock (e.g. 0.5), read on SIGUSR2.", s: &f.ClockFile},
		{name: "lease-duration", usage: "Lease duration.", d: &f.LeaseDuration},
		{name: "renew-deadline", usage: "Renew deadline.", d: &f.RenewDeadline},
		{name: "retry-period", usage: "Retry period.", d: &f.RetryPeriod},
		{name: "safety-margin", usage: "Safety margin of the safe-work deadline (fenced).", d: &f.SafetyMargin},
		{name: "write-interval", usage: "Time between two writes while leading.", d: &f.WriteInterval},
		{name: "read-interval", usage: "Time between two reads.", d: &f.ReadInterval},
		{name: "request-timeout", usage: "Timeout of one write or read.", d: &f.RequestTimeout},
	}
}

// RegisterFlags defines the worker's flags on fs, setting f, with f's values as their defaults.
func (f *WorkerFlags) RegisterFlags(fs *flag.FlagSet) {
	for _, wf := range f.flags() {
		if wf.s != nil {
			fs.StringVar(wf.s, wf.name, *wf.s, wf.usage)
		} else {
			fs.DurationVar(wf.d, wf.name, *wf.d, wf.usage)
		}
	}
}

// Args is f as the worker's command line; a field left empty or zero is left out (the worker's default).
func (f WorkerFlags) Args() []string {
	var args []string
	for _, wf := range f.flags() {
		switch {
		case wf.s != nil && *wf.s != "":
			args = append(args, "--"+wf.name+"="+*wf.s)
		case wf.d != nil && *wf.d != 0:
			args = append(args, "--"+wf.name+"="+wf.d.String())
		}
	}
	return args
}
