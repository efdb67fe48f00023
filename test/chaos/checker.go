package chaos

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// Rules the checker enforces; a Violation names one.
const (
	// RuleEpochOrder: a target's admitted epochs never decrease in resourceVersion order (no write with an
	// epoch below one the resource admitted is persisted).
	RuleEpochOrder = "epoch-order"
	// RuleHolder: every persisted data write came from the acquirer and holder of its epoch, after the
	// acquisition, while the Lease was at that epoch (see Check for the one legal lag).
	RuleHolder = "holder"
	// RuleAdversary: a write made by an adversary (F12) was persisted.
	RuleAdversary = "adversary"
	// RuleUnknownWriter: the target holds data no recorded client wrote.
	RuleUnknownWriter = "unknown-writer"
	// RuleLostAck: a write its client saw acknowledged never appears in the observer's history.
	RuleLostAck = "lost-ack"
	// RuleRefusedStored: a write its client saw refused appears in the observer's history.
	RuleRefusedStored = "refused-stored"
	// RuleLinearizable: the target, as a fenced register, is not linearizable (porcupine).
	RuleLinearizable = "linearizable"
	// RuleObserverGap: the observer's watch had to relist: the history may miss versions.
	RuleObserverGap = "observer-gap"
)

// History is everything one run recorded.
type History struct {
	// Ops are the clients' operations (workers and adversaries), calls and returns merged.
	Ops []Op
	// Versions are the observer's, in the order received.
	Versions []Version
	// Bindings maps each target ("namespace/name") to the Lease ("namespace/name") that guards it.
	Bindings map[string]string
	// Fenced is true when the targets are FencedResources whose Leases carry fencekit epochs; false for
	// the control (client-go Leases, ConfigMaps, the epoch being the writer's leaseTransitions + 1).
	Fenced bool
}

// Violation is one broken invariant, with what shows it.
type Violation struct {
	Rule   string `json:"rule"`
	Target string `json:"target"`
	RV     int64  `json:"rv,omitempty"`
	Op     string `json:"op,omitempty"`
	Detail string `json:"detail"`
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", v.Rule, v.Target)
	if v.RV != 0 {
		fmt.Fprintf(&b, " rv=%d", v.RV)
	}
	if v.Op != "" {
		fmt.Fprintf(&b, " op=%s", v.Op)
	}
	return b.String() + ": " + v.Detail
}

// Report is the checker's verdict on a History.
type Report struct {
	// Writes counts data writes attempted (workers' and adversaries'), split by the client's outcome.
	Writes, Admitted, Refused, Unknown int
	// UnknownStored counts Unknown writes the observer saw stored.
	UnknownStored int
	// Fences and Reads count fence-on-acquire operations and reads.
	Fences, Reads int
	// LateAdmissions counts fenced writes stored after the Lease moved on but before the resource
	// admitted the new epoch (admitted against the Lease as it was; see Check).
	LateAdmissions int
	// StaleRefused counts the workers' writes (not the adversaries') refused as stale
	// (protocol.ReasonStale): made believing to lead after the Lease had moved on, the overlaps of
	// leadership the fence stopped.
	StaleRefused int
	// Linearizability is porcupine's result per target.
	Linearizability map[string]string
	Violations      []Violation
}

// Check applies every invariant to h. visualize, if set, is called with each target that is not
// linearizable and porcupine's visualization data, to write it as HTML.
//
// The holder rule has one legal lag, which the design describes: the webhook reads the Lease (a quorum
// read) before the write is stored, so an acquisition can be stored between the two; the write is then
// stored after the Lease moved to epoch e+1 but before fence-on-acquire raised the resource to e+1, and
// before any holder of e+1 was handed its token. Such a write is counted in LateAdmissions; one stored
// after the resource admitted e+1 breaks the epoch order and is a violation.
func Check(h History, visualize func(target string, lin Linearization)) Report {
	r := Report{Linearizability: map[string]string{}}
	byOp := map[string]Op{}
	for _, op := range h.Ops {
		byOp[op.Op] = op
		switch op.Kind {
		case KindWrite:
			r.Writes++
			switch op.Outcome {
			case Admitted:
				r.Admitted++
			case Refused:
				r.Refused++
				if op.Adversary == "" && op.Reason == string(protocol.ReasonStale) {
					r.StaleRefused++
				}
			default:
				r.Unknown++
			}
		case KindFence:
			r.Fences++
		case KindRead:
			r.Reads++
		}
	}
	leases := map[string][]Version{}
	targets := map[string][]Version{}
	for _, v := range h.Versions {
		switch v.Kind {
		case KindGap:
			r.Violations = append(r.Violations, Violation{Rule: RuleObserverGap, Target: v.Name,
				Detail: "the observer's watch relisted; versions may be missing, so the history is inconclusive"})
		case KindLease:
			leases[v.Name] = append(leases[v.Name], v)
		default:
			if v.Event != "DELETED" {
				targets[v.Name] = append(targets[v.Name], v)
			}
		}
	}
	for _, vs := range leases {
		sortByRV(vs)
	}
	names := make([]string, 0, len(h.Bindings))
	for t := range h.Bindings {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, target := range names {
		vs := dedupe(targets[target])
		ls := leases[h.Bindings[target]]
		stored := map[string]Version{} // op -> first version storing it
		for _, v := range vs {
			if _, seen := stored[v.Value.Op]; v.Value.Op != "" && !seen {
				stored[v.Value.Op] = v
			}
		}
		r.Violations = append(r.Violations, checkEpochOrder(target, vs, byOp)...)
		late, vio := checkHolders(target, vs, ls, byOp, h.Fenced)
		r.LateAdmissions += late
		r.Violations = append(r.Violations, vio...)
		r.Violations = append(r.Violations, checkAcks(target, h.Ops, vs, stored)...)
		ops, unknownStored := resolve(target, h.Ops, vs, stored)
		r.UnknownStored += unknownStored
		lin := CheckLinearizable(ops)
		r.Linearizability[target] = string(lin.Result)
		if lin.Result == "Illegal" {
			r.Violations = append(r.Violations, Violation{Rule: RuleLinearizable, Target: target,
				Detail: fmt.Sprintf("no linearization of %d operations satisfies the fenced-register model", len(ops))})
			if visualize != nil {
				visualize(target, lin)
			}
		}
	}
	return r
}

func sortByRV(vs []Version) { sort.SliceStable(vs, func(i, j int) bool { return vs[i].RV < vs[j].RV }) }

// dedupe orders a target's versions by resourceVersion and keeps those that changed what the checker
// looks at (epoch, op, writer): the operator's status updates are dropped.
func dedupe(vs []Version) []Version {
	vs = append([]Version(nil), vs...)
	sortByRV(vs)
	var out []Version
	for _, v := range vs {
		if n := len(out); n > 0 && (out[n-1].RV == v.RV || (out[n-1].Value == v.Value && out[n-1].Writer == v.Writer)) {
			continue
		}
		out = append(out, v)
	}
	return out
}

func describe(v Version, byOp map[string]Op) string {
	who := v.Writer
	if op, ok := byOp[v.Value.Op]; ok {
		who = op.Process
		if op.Adversary != "" {
			who += " (adversary " + op.Adversary + ")"
		}
	}
	return fmt.Sprintf("rv %d epoch %d op %q by %s", v.RV, v.Value.Epoch, v.Value.Op, who)
}

// checkEpochOrder: the epochs a target stores never decrease.
func checkEpochOrder(target string, vs []Version, byOp map[string]Op) []Violation {
	var out []Violation
	var highest Version
	for _, v := range vs {
		if v.Value.Epoch < highest.Value.Epoch {
			out = append(out, Violation{Rule: RuleEpochOrder, Target: target, RV: v.RV, Op: v.Value.Op,
				Detail: fmt.Sprintf("stale write persisted: %s, after the target admitted epoch %d (%s)",
					describe(v, byOp), highest.Value.Epoch, describe(highest, byOp))})
			continue
		}
		highest = v
	}
	return out
}

// leaseAt returns the last Lease version stored before rv.
func leaseAt(ls []Version, rv int64) (Version, bool) {
	i := sort.Search(len(ls), func(i int) bool { return ls[i].RV >= rv })
	if i == 0 {
		return Version{}, false
	}
	return ls[i-1], true
}

// checkHolders: every data write was made by a recorded client, not an adversary, by the holder of its
// epoch (fenced: the acquirer's user, after the acquisition, at the epoch the Lease was at).
func checkHolders(target string, vs []Version, ls []Version, byOp map[string]Op, fenced bool) (late int, out []Violation) {
	prevOp := ""
	for i, v := range vs {
		if v.Value.Op == prevOp {
			continue // a fence or another change that left the data alone
		}
		prevOp = v.Value.Op
		if v.Value.Op == "" {
			continue
		}
		bad := func(rule, format string, args ...any) {
			out = append(out, Violation{Rule: rule, Target: target, RV: v.RV, Op: v.Value.Op, Detail: fmt.Sprintf(format, args...)})
		}
		op, ok := byOp[v.Value.Op]
		switch {
		case !ok:
			bad(RuleUnknownWriter, "stored data of an operation no client recorded: %s", describe(v, byOp))
			continue
		case op.Adversary != "":
			bad(RuleAdversary, "an adversary's write was persisted: %s (%s, presenting epoch %d as user %s)", describe(v, byOp), op.Adversary, op.Epoch, op.User)
			continue
		}
		at, ok := leaseAt(ls, v.RV)
		if !fenced {
			if !ok || at.Holder != op.Process {
				bad(RuleHolder, "%s stored while the Lease (rv %d) was held by %q", describe(v, byOp), at.RV, at.Holder)
			}
			continue
		}
		e := v.Value.Epoch
		if e != op.Epoch || v.Writer != op.Process {
			bad(RuleHolder, "%s stored as epoch %d writer %q, but the write presented epoch %d as %s", describe(v, byOp), e, v.Writer, op.Epoch, op.Process)
			continue
		}
		acq, found := acquisition(ls, e)
		switch {
		case !found:
			bad(RuleHolder, "%s: no acquisition of epoch %d was observed", describe(v, byOp), e)
		case acq.RV > v.RV:
			bad(RuleHolder, "%s stored before epoch %d was acquired (lease rv %d)", describe(v, byOp), e, acq.RV)
		case acq.Holder != op.Process || acq.Acquirer != op.User:
			bad(RuleHolder, "%s: epoch %d was acquired by %s as user %s, not by %s as %s", describe(v, byOp), e, acq.Holder, acq.Acquirer, op.Process, op.User)
		case at.Value.Epoch == e && at.Holder == op.Process:
			// the Lease was at the write's epoch, held by its writer
		case raisedPast(vs[:i], e):
			bad(RuleHolder, "%s stored after the target admitted a later epoch; the Lease was at epoch %d held by %q (rv %d)", describe(v, byOp), at.Value.Epoch, at.Holder, at.RV)
		default:
			late++
		}
	}
	return late, out
}

func acquisition(ls []Version, epoch int64) (Version, bool) {
	for _, l := range ls {
		if l.Value.Epoch == epoch {
			return l, true
		}
	}
	return Version{}, false
}

func raisedPast(vs []Version, e int64) bool {
	for _, v := range vs {
		if v.Value.Epoch > e {
			return true
		}
	}
	return false
}

// checkAcks: an acknowledged write is in the ground truth, a refused one is not.
func checkAcks(target string, ops []Op, vs []Version, stored map[string]Version) []Violation {
	var out []Violation
	for _, op := range ops {
		if op.Target != target {
			continue
		}
		v, isStored := stored[op.Op]
		switch {
		case op.Kind == KindWrite && op.Outcome == Admitted && !isStored:
			out = append(out, Violation{Rule: RuleLostAck, Target: target, Op: op.Op,
				Detail: fmt.Sprintf("%s's write at epoch %d was acknowledged but never observed stored", op.Process, op.Epoch)})
		case op.Kind == KindWrite && op.Outcome == Refused && isStored:
			out = append(out, Violation{Rule: RuleRefusedStored, Target: target, Op: op.Op, RV: v.RV,
				Detail: fmt.Sprintf("%s's write at epoch %d was refused (%s) but is stored", op.Process, op.Epoch, op.Reason)})
		case op.Kind == KindFence && op.Outcome == Admitted && !epochStored(vs, op.Epoch):
			out = append(out, Violation{Rule: RuleLostAck, Target: target, Op: op.Op,
				Detail: fmt.Sprintf("%s's fence at epoch %d was acknowledged but the target never showed epoch %d", op.Process, op.Epoch, op.Epoch)})
		}
	}
	return out
}

func epochStored(vs []Version, e int64) bool {
	for _, v := range vs {
		if v.Value.Epoch == e {
			return true
		}
	}
	return false
}

// resolve returns target's operations for the linearizability check, with each Unknown write decided by
// the ground truth: stored (then it took effect by the time the observer saw it) or not (then, like a
// refused write, it had no effect and is left out). A fence whose answer was lost counts as stored if the
// target shows its epoch with its holder as writer.
func resolve(target string, ops []Op, vs []Version, stored map[string]Version) (out []Op, unknownStored int) {
	for _, op := range ops {
		if op.Target != target {
			continue
		}
		switch {
		case op.Kind == KindRead && op.Outcome != Admitted:
			continue
		case op.Kind == KindRead:
		case op.Outcome == Admitted:
		case op.Outcome == Refused:
			continue
		case op.Kind == KindWrite:
			v, ok := stored[op.Op]
			if !ok {
				continue
			}
			unknownStored++
			op.Outcome = Admitted
			if op.Return == 0 || op.Return > v.At {
				op.Return = v.At
			}
		case op.Kind == KindFence:
			v, ok := fenceVersion(vs, op)
			if !ok {
				continue
			}
			op.Outcome = Admitted
			if op.Return == 0 || op.Return > v.At {
				op.Return = v.At
			}
		}
		out = append(out, op)
	}
	return out, unknownStored
}

func fenceVersion(vs []Version, op Op) (Version, bool) {
	for i, v := range vs {
		if v.Value.Epoch == op.Epoch && v.Writer == op.Process && (i == 0 || vs[i-1].Value.Op == v.Value.Op) {
			return v, true
		}
	}
	return Version{}, false
}
