package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault names an injector. Each is seedable: Schedule draws every time, length and choice from the seed.
type Fault string

const (
	// F1 kills the holder with SIGKILL, and restarts it (a new incarnation) a moment later.
	F1Kill Fault = "F1"
	// F2 stops the holder with SIGTERM (it releases its Lease), and restarts it.
	F2Term Fault = "F2"
	// F3 is the zombie: the holder stops itself with SIGSTOP after its leadership check and before its
	// write, and is continued after two to three lease durations.
	F3Zombie Fault = "F3"
	// F4 partitions one worker (usually the holder) from the apiserver in its proxy: a blackhole that
	// delivers the held requests late, or dropped connections.
	F4Partition Fault = "F4"
	// F5 slows the apiserver down for every worker (a delay per chunk in every proxy).
	F5Slow Fault = "F5"
	// F6 restarts kube-apiserver (SIGTERM, then the same command line again after a downtime).
	F6APIServerRestart Fault = "F6"
	// F7 restarts etcd the same way.
	F7EtcdRestart Fault = "F7"
	// F8 skews clock rates: the holder's elector clock runs slow and the standbys' fast, and the holder is
	// cut off from the apiserver for a time in the window where the skew matters: the standbys take the
	// Lease over while the holder still believes it leads.
	F8ClockSkew Fault = "F8"
	// F9 starves a worker of CPU: niced to 19 and stopped in bursts (SIGSTOP/SIGCONT).
	F9Starve Fault = "F9"
	// F10 slows the admission webhook down, or takes it down (the proxy in front of it).
	F10Webhook Fault = "F10"
	// F11 rotates the webhook's CA and serving certificate while the workers write, in the order a
	// rotator may apply the two halves (caBundle first, files first, or the caBundle trusting both).
	F11CertRotation Fault = "F11"
	// F12 makes adversarial writes: the holder's user without a token, another worker's user with the
	// current token, the holder's user with a future epoch and with the previous one.
	F12Adversary Fault = "F12"
)

// AllFaults are the faults the suite implements, in order.
var AllFaults = []Fault{F1Kill, F2Term, F3Zombie, F4Partition, F5Slow, F6APIServerRestart, F7EtcdRestart, F8ClockSkew,
	F9Starve, F10Webhook, F11CertRotation, F12Adversary}

// FencedOnly reports whether a fault has no meaning for the unfenced control: it has no webhook (F10, F11),
// no fencekit tokens to forge (F12), and client-go's LeaderElector takes no clock (F8).
func (f Fault) FencedOnly() bool {
	return f == F8ClockSkew || f == F10Webhook || f == F11CertRotation || f == F12Adversary
}

// ParseFaults parses "F1,F3" (or "all").
func ParseFaults(s string) ([]Fault, error) {
	if s == "all" {
		return AllFaults, nil
	}
	var out []Fault
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		ok := false
		for _, known := range AllFaults {
			if Fault(f) == known {
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("unknown fault %q (known: %v)", f, AllFaults)
		}
		out = append(out, Fault(f))
	}
	return out, nil
}

// Event is one injection of a schedule.
type Event struct {
	// After is the quiet time before it starts (from the end of the previous event).
	After time.Duration
	Fault Fault
	// Length is how long it lasts (the pause, the partition, the slowness; for F1 and F2 the time before
	// the restart).
	Length time.Duration
	// Delay is F5's and F10's delay per chunk, and F9's stop burst.
	Delay time.Duration
	// Drop selects F4's and F10's dropped connections over a blackhole or a delay.
	Drop bool
	// Bystander makes F4 partition a worker other than the holder.
	Bystander bool
	// Slow and Fast are F8's clock rates: the holder's and the standbys'.
	Slow, Fast float64 `json:",omitempty"`
	// Rotation is F11's order: RotateBundleFirst, RotateFilesFirst or RotateOverlap; Delay is the time
	// between its two halves.
	Rotation string `json:",omitempty"`
	// Fallback is the worker index used when the event's target (the holder) cannot be determined.
	Fallback int
}

func (e Event) String() string {
	s := fmt.Sprintf("+%.1fs %s for %.1fs", e.After.Seconds(), e.Fault, e.Length.Seconds())
	switch e.Fault {
	case F4Partition:
		s += map[bool]string{true: " drop", false: " blackhole"}[e.Drop] + map[bool]string{true: " (a standby)", false: " (the holder)"}[e.Bystander]
	case F5Slow, F9Starve:
		s += fmt.Sprintf(" delay %s", e.Delay)
	case F10Webhook:
		if e.Drop {
			s += " down"
		} else {
			s += fmt.Sprintf(" delay %s", e.Delay)
		}
	case F8ClockSkew:
		s += fmt.Sprintf(" holder's clock %.2fx, standbys' %.2fx", e.Slow, e.Fast)
	case F11CertRotation:
		s += fmt.Sprintf(" %s, %s between the halves", e.Rotation, e.Delay.Round(time.Millisecond))
	default:
		// The other faults have no parameters beyond their start and length.
	}
	return s
}

// The orders in which F11 applies a rotation's two halves: the caBundle the apiserver trusts and the
// serving certificate the webhook server presents.
const (
	// RotateBundleFirst replaces the caBundle with the new CA, then the serving certificate: until the
	// webhook server has loaded it, the apiserver does not trust the webhook.
	RotateBundleFirst = "bundle-first"
	// RotateFilesFirst replaces the serving certificate, then the caBundle: until then, the apiserver does
	// not trust the new certificate (connections it already has keep working).
	RotateFilesFirst = "files-first"
	// RotateOverlap adds the new CA to the caBundle, replaces the serving certificate, then removes the
	// old CA: the apiserver trusts the webhook throughout.
	RotateOverlap = "overlap"
)

var rotations = []string{RotateBundleFirst, RotateFilesFirst, RotateOverlap}

// Schedule returns the events of a run of length d drawing from faults with seed: the same arguments
// always give the same schedule. lease is the Lease duration, which the lengths scale with.
func Schedule(seed int64, faults []Fault, d, lease time.Duration, workers int) []Event {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6663_6b69_74)) // "fckit"
	between := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(lease))
	}
	var out []Event
	var total time.Duration
	for {
		e := Event{After: between(0.5, 1.2), Fault: faults[rng.IntN(len(faults))], Fallback: rng.IntN(workers)}
		switch e.Fault {
		case F1Kill:
			e.Length = between(0.3, 1.5)
		case F2Term:
			e.Length = between(0.2, 1)
		case F3Zombie:
			e.Length = between(2, 3)
		case F4Partition:
			e.Length = between(1.5, 3)
			e.Drop = rng.IntN(3) == 0
			e.Bystander = rng.IntN(4) == 0
		case F5Slow:
			e.Length = between(1, 2.5)
			e.Delay = time.Duration(50+rng.IntN(350)) * time.Millisecond
		case F6APIServerRestart, F7EtcdRestart:
			e.Length = between(0.3, 1.5)
		case F9Starve:
			e.Length = between(1, 2)
			e.Delay = time.Duration(50+rng.IntN(350)) * time.Millisecond
		case F10Webhook:
			e.Length = between(1, 2)
			e.Drop = rng.IntN(3) == 0
			e.Delay = time.Duration(200+rng.IntN(2800)) * time.Millisecond
		case F8ClockSkew:
			e.Length = between(1, 1.5) // after the partition, before the clocks run at rate 1 again
			e.Slow = 0.5 + 0.1*rng.Float64()
			e.Fast = 1.6 + 0.4*rng.Float64()
		case F11CertRotation:
			e.Rotation = rotations[rng.IntN(len(rotations))]
			e.Delay = between(0, 1)
			e.Length = between(0.5, 1)
		case F12Adversary:
			e.Length = between(0.3, 1)
		}
		if total+e.After+e.Length > d && len(out) > 0 {
			return out
		}
		total += e.After + e.Length
		out = append(out, e)
	}
}
