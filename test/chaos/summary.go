package chaos

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Scenario is what a run injects and whether it runs fencekit or the control.
type Scenario struct {
	// Label is the fault ("F3") or "mixed".
	Label  string
	Faults []Fault
	Fenced bool
}

// Mode is "fencekit" or "control".
func (s Scenario) Mode() string {
	if s.Fenced {
		return "fencekit"
	}
	return "control"
}

// Row is one line of the summary: every run of a scenario, added up.
type Row struct {
	Mode, Label                                  string
	Runs, Injected                               int
	Ops                                          int // every operation attempted: writes, fences, reads
	Writes, Admitted, Refused, Unknown, Late     int
	StaleRefused                                 int
	Violations, NotLinearizable, ZombiesInjected int
}

// Summarize adds up results by scenario, in the order the scenarios first ran.
func Summarize(scenarios []Scenario, results []*RunResult) []Row {
	rows := map[string]*Row{}
	var keys []string
	for i, res := range results {
		s := scenarios[i]
		k := s.Mode() + "/" + s.Label
		row, ok := rows[k]
		if !ok {
			row = &Row{Mode: s.Mode(), Label: s.Label}
			rows[k] = row
			keys = append(keys, k)
		}
		row.Runs++
		for f, n := range res.Applied {
			row.Injected += n
			if f == F3Zombie {
				row.ZombiesInjected += n
			}
		}
		r := res.Report
		row.Ops += r.Writes + r.Fences + r.Reads
		row.Writes += r.Writes
		row.Admitted += r.Admitted
		row.Refused += r.Refused
		row.Unknown += r.Unknown
		row.Late += r.LateAdmissions
		row.StaleRefused += r.StaleRefused
		row.Violations += len(r.Violations)
		for _, v := range r.Linearizability {
			if v == "Illegal" {
				row.NotLinearizable++
			}
		}
	}
	out := make([]Row, 0, len(keys))
	for _, k := range keys {
		out = append(out, *rows[k])
	}
	return out
}

// PrintTable renders rows as the table docs/reliability.md shows.
func PrintTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tfaults\truns\tinjected\tops\twrites\tadmitted\trefused\tunknown\tstale-refused\tlate-admitted\tnot linearizable\tviolations\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.Mode, r.Label, r.Runs, r.Injected,
			r.Ops, r.Writes, r.Admitted, r.Refused, r.Unknown, r.StaleRefused, r.Late, r.NotLinearizable, r.Violations)
	}
	_ = tw.Flush()
}
