package model

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Source is the model, fencekit.pml.
//
//go:embed fencekit.pml
var Source []byte

// ErrNoSpin is returned when spin or gcc is not on PATH.
var ErrNoSpin = errors.New("spin is not on PATH: install it (Debian: apt-get install -y spin; it also needs gcc); .ci/run does")

// Result is the outcome of one Check.
type Result struct {
	Check Check
	// Violated is true if spin found a violation; Property names it ("P1" to "P6") and Assertion is
	// the assertion's text.
	Violated  bool
	Property  string
	Assertion string
	// States, Transitions and Depth are spin's counts; Elapsed is pan's run time.
	States, Transitions, Depth int64
	Elapsed                    time.Duration
	// Story is the counterexample as the model's printf lines, one step a line (nil without a violation).
	Story []string
}

// OK reports whether the run had the outcome its Check wants.
func (r Result) OK() bool {
	if !r.Check.Refute {
		return !r.Violated
	}
	return r.Violated && (r.Check.Property == "" || r.Check.Property == r.Property)
}

// MemoryMB bounds pan's state store (pan -DMEMLIM): a run past it fails rather than swap.
const MemoryMB = 6000

// Run compiles and runs the model for c in a temporary directory, exhaustively (no bitstate, no hash
// compaction), with MAXE = maxEpoch, and replays the trail of a violation into a Story.
func Run(ctx context.Context, c Check, maxEpoch int) (Result, error) {
	res := Result{Check: c}
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return res, ErrNoSpin
		}
	}
	dir, err := os.MkdirTemp("", "fencekit-model-")
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := os.WriteFile(filepath.Join(dir, "fencekit.pml"), Source, 0o644); err != nil {
		return res, err
	}
	defs := []string{"-DMAXE=" + strconv.Itoa(maxEpoch)}

	for _, d := range c.Defines {
		defs = append(defs, "-D"+d)
	}
	if _, err := run(ctx, dir, "spin", append(append([]string{"-a"}, defs...), "fencekit.pml")...); err != nil {
		return res, err
	}
	mem := MemoryMB
	if c.MemoryMB != 0 {
		mem = c.MemoryMB
	}
	cc := []string{"-O2", "-DSAFETY", "-DNOBOUNDCHECK", "-DCOLLAPSE", "-DMEMLIM=" + strconv.Itoa(mem)}
	if c.Refute {
		cc = append(cc, "-DBFS") // breadth first: the shortest counterexample, the shortest story
	}
	if _, err := run(ctx, dir, "gcc", append(cc, "-o", "pan", "pan.c")...); err != nil {
		return res, err
	}
	out, err := run(ctx, dir, "./pan", "-m10000000", "-E", "-w26")
	if err != nil && !strings.Contains(out, "errors:") {
		return res, err
	}
	if err := parseStats(out, &res); err != nil {
		return res, err
	}
	if !res.Violated {
		return res, nil
	}
	trail, err := run(ctx, dir, "spin", append(append([]string{"-t", "-T"}, defs...), "fencekit.pml")...)
	if err != nil {
		return res, fmt.Errorf("replaying the trail: %w", err)
	}
	res.Story, res.Assertion = story(trail)
	res.Property = property(res.Assertion)
	return res, nil
}

func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(string(out)))
	}
	return string(out), nil
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

var (
	reSummary = regexp.MustCompile(`depth reached (\d+), errors: (\d+)`)
	reStates  = regexp.MustCompile(`([0-9.e+]+) states, stored`)
	reTrans   = regexp.MustCompile(`([0-9.e+]+) transitions \(= (?:stored\+matched|visited\+matched)\)`)
	reElapsed = regexp.MustCompile(`pan: elapsed time ([0-9.e+]+) seconds`)
)

func parseStats(out string, res *Result) error {
	m := reSummary.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("pan printed no summary:\n%s", tail(out))
	}
	res.Depth, _ = strconv.ParseInt(m[1], 10, 64)
	res.Violated = m[2] != "0"
	if m := reStates.FindStringSubmatch(out); m != nil { // pan prints 1.0156562e+08 past 10^8
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			res.States = int64(f)
		}
	}
	if m := reTrans.FindStringSubmatch(out); m != nil {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			res.Transitions = int64(f)
		}
	}
	if m := reElapsed.FindStringSubmatch(out); m != nil {
		if s, err := strconv.ParseFloat(m[1], 64); err == nil {
			res.Elapsed = time.Duration(s * float64(time.Second))
		}
	}
	// A search that was cut short proves nothing: the depth bound or the memory bound was hit.
	for _, bad := range []string{"max search depth too small", "out of memory", "pan: reached -DMEMLIM bound"} {
		if strings.Contains(out, bad) && !res.Violated {
			return fmt.Errorf("the search was incomplete (%s):\n%s", bad, tail(out))
		}
	}
	return nil
}

// story keeps the model's printf lines of a replayed trail (the mtype words with spaces) and the failed
// assertion.
func story(trail string) (lines []string, assertion string) {
	for _, l := range strings.Split(trail, "\n") {
		switch {
		case strings.HasPrefix(l, "spin: text of failed assertion: "):
			assertion = strings.TrimPrefix(l, "spin: text of failed assertion: ")
		case strings.HasPrefix(l, "spin:"), strings.HasPrefix(l, "#processes"), strings.TrimSpace(l) == "",
			strings.Contains(l, " processes created"), strings.HasPrefix(strings.TrimSpace(l), "proc "),
			regexp.MustCompile(`^\s*\d+:\s+proc`).MatchString(l), strings.HasPrefix(l, "\t\t"):
		default:
			lines = append(lines, strings.ReplaceAll(l, "_", " "))
		}
	}
	return lines, assertion
}

// property names the property an assertion of fencekit.pml checks (docs/model.md).
func property(assertion string) string {
	a := strings.ReplaceAll(assertion, " ", "")
	switch {
	case strings.Contains(a, "o_pad["):
		return "P4" // the holder's write failed for size
	case strings.Contains(a, "nhwl"):
		return "P5" // an acquisition failed for the declarations
	case strings.Contains(a, "bcov"):
		return "P6" // a binding of a covered Pod admitted for a non-holder
	case strings.Contains(a, "handedAll"):
		return "P1" // the copy admitted after a higher epoch was handed out
	case strings.Contains(a, "owe["):
		return "P1" // a write the copy admitted after the Lease moved on was not written over
	case strings.Contains(a, "late["), strings.Contains(a, "handedF"):
		return "P1" // a write committed after a higher epoch was handed out
	case strings.Contains(a, "hiF["):
		return "P2"
	case strings.Contains(a, "v!=2"), strings.Contains(a, "o_other["), strings.Contains(a, "lockout"):
		return "P3"
	}
	return ""
}
