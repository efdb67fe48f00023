// Command record keeps fencekit's benchmark results as a regression guard. It reads the output of
// `go test -bench` on stdin and copies it to stdout; at the end it writes every figure the benchmarks
// reported (b.ReportMetric), with the commit, the date and the machine, as one JSON file in -dir, and
// prints each figure next to the same figure of the previous file there, with their ratio.
//
//	go test -run '^$' -bench . -benchtime 1x ./test/bench/... | go run ./test/bench/record -dir test/bench/results
//
// The machine fencekit is measured on is shared: compare ratios within one run first (the benchmarks
// report them), and read a ratio to the previous run as a hint, not a verdict.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Result is one run of the benchmarks, as stored in -dir.
type Result struct {
	Commit  string    `json:"commit"`
	Dirty   bool      `json:"dirty,omitempty"`
	Date    time.Time `json:"date"`
	Machine Machine   `json:"machine"`
	// Figures maps "package/Benchmark" to its figures by unit ("webhook-p50-ms": 3.1). A benchmark that ran
	// more than once (go test -count, or a sub-benchmark run again under the same name, which go test
	// suffixes "#01", "#02", ...) has the median of its runs here, and every run in Samples, except a unit of
	// worstRun, whose worst run is kept: a median would hide the one run that lost a Lease.
	Figures map[string]map[string]float64 `json:"figures"`
	// Samples holds, for a benchmark that ran more than once, each run's figure by unit, in the order run.
	Samples map[string]map[string][]float64 `json:"samples,omitempty"`

	failed bool // the output reported a failure: the figures are partial
}

// Machine is what the figures were measured on.
type Machine struct {
	Hostname string `json:"hostname,omitempty"`
	CPU      string `json:"cpu,omitempty"`
	CPUs     int    `json:"cpus"`
	GOOS     string `json:"goos"`
	GOARCH   string `json:"goarch"`
	Go       string `json:"go"`
	// LoadAvg is /proc/loadavg's 1-, 5- and 15-minute load averages when the run ended: the machine is
	// shared, and its load moves every absolute number.
	LoadAvg string `json:"loadavg,omitempty"`
}

func main() {
	dir := flag.String("dir", "test/bench/results", "directory of the JSON results")
	flag.Parse()
	res, err := read(os.Stdin, os.Stdout)
	if err != nil {
		fail(err)
	}
	if len(res.Figures) == 0 {
		fail(fmt.Errorf("no benchmark results on stdin: nothing recorded"))
	}
	if res.failed {
		fail(fmt.Errorf("a benchmark failed: nothing recorded"))
	}
	prev, prevName, err := latest(*dir)
	if err != nil {
		fail(err)
	}
	name, err := write(*dir, res)
	if err != nil {
		fail(err)
	}
	fmt.Printf("\nrecorded %s\n", name)
	if prev == nil {
		fmt.Println("no previous result to compare with")
		return
	}
	compare(os.Stdout, prev, prevName, res)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "record:", err)
	os.Exit(1)
}

// read copies in to out and collects the benchmark lines' figures.
func read(in io.Reader, out io.Writer) (*Result, error) {
	res := &Result{Date: time.Now().UTC(), Figures: map[string]map[string]float64{}, Samples: map[string]map[string][]float64{},
		Machine: Machine{CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version()}}
	res.Machine.Hostname, _ = os.Hostname()
	pkg := ""
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(out, line)
		switch {
		case strings.HasPrefix(line, "--- FAIL") || strings.HasPrefix(line, "FAIL"):
			res.failed = true
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(line, "pkg: ")
		case strings.HasPrefix(line, "cpu: "):
			res.Machine.CPU = strings.TrimPrefix(line, "cpu: ")
		case strings.HasPrefix(line, "Benchmark"):
			f := strings.Fields(line)
			if len(f) < 4 || len(f)%2 != 0 {
				continue // a benchmark's name printed alone, before its result line
			}
			if _, err := strconv.Atoi(f[1]); err != nil {
				continue
			}
			name := filepath.Base(pkg) + "/" + benchmarkName(f[0])
			if res.Samples[name] == nil {
				res.Samples[name] = map[string][]float64{}
			}
			for i := 2; i+1 < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					return nil, fmt.Errorf("reading %q: %w", line, err)
				}
				res.Samples[name][f[i+1]] = append(res.Samples[name][f[i+1]], v)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for name, units := range res.Samples {
		res.Figures[name] = map[string]float64{}
		runs := 1
		for unit, vs := range units {
			if worst, ok := worstRun[unit]; ok {
				res.Figures[name][unit] = worst(vs)
			} else {
				res.Figures[name][unit] = median(vs)
			}
			runs = max(runs, len(vs))
		}
		if runs == 1 {
			delete(res.Samples, name)
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			res.Machine.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if b, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		res.Commit = strings.TrimSpace(string(b))
	}
	if b, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
		res.Dirty = len(strings.TrimSpace(string(b))) > 0
	}
	return res, nil
}

// benchmarkName is a result line's benchmark name without the GOMAXPROCS suffix ("-2") and the suffix go test
// gives a sub-benchmark run again under the same name ("#01"): the runs of one benchmark share a name.
func benchmarkName(s string) string {
	if i := strings.LastIndex(s, "-"); i > 0 {
		if _, err := strconv.Atoi(s[i+1:]); err == nil {
			s = s[:i]
		}
	}
	if i := strings.LastIndex(s, "#"); i > 0 {
		if _, err := strconv.Atoi(s[i+1:]); err == nil {
			s = s[:i]
		}
	}
	return s
}

// worstRun maps a unit that counts failures to its worst run, which a benchmark that ran more than once
// records instead of the median.
var worstRun = map[string]func([]float64) float64{
	"leaderships-lost": slices.Max[[]float64],
	"leases-led":       slices.Min[[]float64],
}

// median is the middle of vs (the mean of the two middle values for an even count).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// latest is the newest result in dir (file names sort by date), nil if there is none.
func latest(dir string) (*Result, string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(names) == 0 {
		return nil, "", err
	}
	slices.Sort(names)
	name := names[len(names)-1]
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, "", err
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", name, err)
	}
	return &r, name, nil
}

func write(dir string, r *Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	commit := r.Commit
	if commit == "" {
		commit = "unknown"
	}
	if r.Dirty {
		commit += "-dirty"
	}
	name := filepath.Join(dir, r.Date.Format("20060102T150405Z")+"-"+commit+".json")
	return name, os.WriteFile(name, append(b, '\n'), 0o644)
}

// compare prints every figure of now that prev has too, with now/prev.
func compare(w io.Writer, prev *Result, prevName string, now *Result) {
	fmt.Fprintf(w, "compared with %s (commit %s, %s, load %s); this run: load %s\n",
		filepath.Base(prevName), prev.Commit, prev.Date.Format(time.RFC3339), prev.Machine.LoadAvg, now.Machine.LoadAvg)
	fmt.Fprintf(w, "%-60s %14s %14s %8s\n", "figure", "previous", "now", "now/prev")
	for _, bench := range sortedKeys(now.Figures) {
		for _, unit := range sortedKeys(now.Figures[bench]) {
			p, ok := prev.Figures[bench][unit]
			if !ok {
				continue
			}
			v := now.Figures[bench][unit]
			ratio := "-"
			if p != 0 {
				ratio = strconv.FormatFloat(v/p, 'f', 2, 64)
			}
			fmt.Fprintf(w, "%-60s %14.4g %14.4g %8s\n", bench+" "+unit, p, v, ratio)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
