package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Style colours output; the zero Style prints plain text (no TTY).
type Style struct{ Color bool }

func (s Style) paint(code, text string) string {
	if !s.Color {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

func (s Style) good(t string) string { return s.paint("32", t) }
func (s Style) bad(t string) string  { return s.paint("31;1", t) }

// Line renders one event of a run for the live timeline.
func (s Style) Line(run string, e Event) string {
	what := e.Msg
	switch e.Msg {
	case "write":
		switch {
		case e.Accepted != nil && *e.Accepted:
			what = s.good(fmt.Sprintf("write %d accepted", e.Write))
		case e.Reason != "":
			what = s.bad(fmt.Sprintf("write %d REJECTED (%s): %s", e.Write, e.Reason, trimDenied(e.Error)))
		default:
			what = s.bad(fmt.Sprintf("write %d failed: %s", e.Write, e.Error))
		}
	case "leading":
		what = "became leader"
	case "pausing":
		what = fmt.Sprintf("about to make write %d: leadership check passed", e.Write)
	}
	epoch := ""
	if e.Epoch > 0 {
		epoch = fmt.Sprintf("epoch %d", e.Epoch)
	}
	return fmt.Sprintf("%7.1fs  %-9s %-4s %-10s %s", e.At.Seconds(), run, e.Worker, epoch, what)
}

// trimDenied drops the apiserver's "admission webhook ... denied the request: " prefix.
func trimDenied(msg string) string {
	if i := strings.Index(msg, "denied the request: "); i >= 0 {
		return msg[i+len("denied the request: "):]
	}
	return msg
}

func lastWriter(r *Result) string {
	if r.Final == nil {
		return "?"
	}
	w := fmt.Sprint(r.Final["writer"])
	if r.Fenced {
		return fmt.Sprintf("%s (write %v, epoch %v)", w, r.Final["write"], r.Final["epoch"])
	}
	return fmt.Sprintf("%s (write %v)", w, r.Final["write"])
}

func lateWrite(s Style, r *Result) string {
	e := r.LateWrite
	switch {
	case e.Accepted != nil && *e.Accepted:
		return s.bad("ACCEPTED")
	case e.Reason != "":
		return s.good(fmt.Sprintf("REJECTED (%s, epoch %d)", e.Reason, e.Epoch))
	default:
		return s.bad("failed: no answer (see below)")
	}
}

// Summary renders the two runs side by side.
func (s Style) Summary(w io.Writer, fenced, unfenced *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	row := func(k, a, b string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", k, a, b) }
	at := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	ft, ut := "fencekit (FencedResource)", "unfenced (client-go + ConfigMap)"
	if fenced.Target != "" {
		ft = "fencekit (" + fenced.Target + ")"
	}
	if unfenced.Target != "" {
		ut = "unfenced (" + unfenced.Target + ")"
	}
	row("", ft, ut)
	row("W1 became leader", fmt.Sprintf("epoch %d", fenced.W1Epoch), "yes")
	row("W1 stopped (SIGSTOP)", fmt.Sprintf("at %s for %s", at(fenced.Stopped), at(fenced.Resumed-fenced.Stopped)),
		fmt.Sprintf("at %s for %s", at(unfenced.Stopped), at(unfenced.Resumed-unfenced.Stopped)))
	row("W2 took over", fmt.Sprintf("epoch %d", fenced.W2Epoch), "yes")
	row("W1's write after SIGCONT", lateWrite(s, fenced), lateWrite(s, unfenced))
	row("last write stored", lastWriter(fenced), lastWriter(unfenced))
	_ = tw.Flush()
}

// Check returns nil if the runs showed what the demo is for: the fenced run refused W1's late write as
// stale and kept W2's data, and the unfenced run let W1 overwrite W2. Otherwise its error says, in one
// line per run that went wrong, which run, what it saw instead, and what to try.
func Check(fenced, unfenced *Result) error {
	var problems []string
	if p := fencedProblem(fenced); p != "" {
		problems = append(problems, "fenced run: "+p)
	}
	if p := unfencedProblem(unfenced); p != "" {
		problems = append(problems, "unfenced run: "+p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s", errNotShown, strings.Join(problems, "\n  "))
	}
	return nil
}

// undecided is the hint for a late write that got no answer from the apiserver (a timeout, a refused
// connection): the demo proved nothing either way.
func undecided(e Event) string {
	return fmt.Sprintf("W1's write after SIGCONT got no answer from the apiserver (%s); the machine may be overloaded: run it again, and if it keeps failing, give it more room with --pause=40s", e.Error)
}

func fencedProblem(r *Result) string {
	late := r.LateWrite
	switch {
	case r.StaleAdmitted():
		return fmt.Sprintf("fencekit ADMITTED the paused holder's write at epoch %d after W2 acquired epoch %d: this is a fencing bug, please report it with this output", late.Epoch, r.W2Epoch)
	case late.Reason == "" && late.Error != "":
		return undecided(late)
	case late.Reason != "FencingStaleEpoch":
		return fmt.Sprintf("W1's write after SIGCONT was refused as %s, not as a stale epoch (%s)", late.Reason, late.Error)
	case r.W2Epoch != r.W1Epoch+1:
		return fmt.Sprintf("W2 acquired epoch %d, not W1's epoch %d + 1: another elector wrote the Lease %s-writer meanwhile", r.W2Epoch, r.W1Epoch, r.Scenario)
	case r.Final == nil || fmt.Sprint(r.Final["writer"]) != "W2":
		return fmt.Sprintf("the FencedResource's stored data is not W2's: %v", r.Final)
	}
	return ""
}

func unfencedProblem(r *Result) string {
	late := r.LateWrite
	switch {
	case !r.StaleAdmitted() && late.Error != "":
		return undecided(late)
	case !r.StaleAdmitted():
		return "W1's write after SIGCONT was not made (no write event): see the timeline above"
	case r.Final == nil || fmt.Sprint(r.Final["writer"]) != "W1":
		return fmt.Sprintf("W1's late write was accepted but the target's stored data is %v, not W1's: another writer came after it", r.Final)
	}
	return ""
}

// Verdict says how a write of the Controller scenario was answered.
func Verdict(e Event) string {
	switch {
	case e.Accepted != nil && *e.Accepted:
		return "ACCEPTED"
	case e.Reason != "":
		return "REJECTED (" + e.Reason + ")"
	}
	return "failed: " + e.Error
}

// ControllerLine renders one event of the Controller scenario for the live timeline.
func (s Style) ControllerLine(run string, e Event) string {
	switch e.Msg {
	case "write":
		e.Msg = fmt.Sprintf("round %s %s: %s", e.Round, e.Op, Verdict(e))
	case "pausing":
		e.Msg = "round " + e.Round + ": four writes took their token; stopping (SIGSTOP)"
	case "resumed":
		e.Msg = "round " + e.Round + ": continued (SIGCONT), sending its writes"
	}
	return s.Line(run, e)
}
