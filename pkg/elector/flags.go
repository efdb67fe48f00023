package elector

import (
	"flag"
	"time"
)

// BindFlags defines on fs the flags that set c's Lease, identity and timings, each defaulting to c's
// current value (a zero timing takes its documented default first):
//
//	--namespace, --lease, --identity, --lease-duration, --renew-deadline, --retry-period, --safety-margin
//
// Set the defaults you want in c before calling it. As in Config, a timing flag set to 0 means its
// default. A program on github.com/spf13/pflag adds them with (*pflag.FlagSet).AddGoFlagSet. New checks
// the values.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "Namespace of the Lease.")
	fs.StringVar(&c.Name, "lease", c.Name, "Name of the Lease to elect on.")
	fs.StringVar(&c.Identity, "identity", c.Identity, "Holder identity (default: $POD_NAME or the hostname, plus a random suffix).")
	for _, d := range []struct {
		field *time.Duration
		name  string
		def   time.Duration
		usage string
	}{
		{&c.LeaseDuration, "lease-duration", DefaultLeaseDuration, "How long standbys wait, from the last renewal of the holder they observed, before taking the Lease over."},
		{&c.RenewDeadline, "renew-deadline", DefaultRenewDeadline, "How long the leader tries to renew before it steps down."},
		{&c.RetryPeriod, "retry-period", DefaultRetryPeriod, "The leader's renewal interval, and the pause between failed attempts."},
		{&c.SafetyMargin, "safety-margin", DefaultSafetyMargin, "Subtracted from the safe-work window: the leader's authority ends at its last renewal's send time + lease-duration*(1-MaxClockDrift) - safety-margin."},
	} {
		if *d.field == 0 {
			*d.field = d.def
		}
		fs.DurationVar(d.field, d.name, *d.field, d.usage)
	}
}
