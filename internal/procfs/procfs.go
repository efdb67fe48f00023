// Package procfs reads what fencekit run, the tests, the benchmarks and the demo need to know about
// processes from Linux's /proc: whether a process is stopped, its parent, threads and children, the CPU
// time it used and its memory. One home for parsing
// /proc/<pid>/stat, whose second field (the command name, in parentheses) may itself contain spaces and
// parentheses.
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux architecture Go
// supports (the kernel's HZ may differ; what it exports to user space does not).
const userHZ = 100

// State is the state letter of thread tid of process pid (/proc/<pid>/task/<tid>/stat): 'R', 'S', 'T'
// (stopped), 'Z' (zombie), and so on. Use tid == pid for the main thread.
func State(pid, tid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("/proc/%d/task/%d/stat: no state after the command name: %q", pid, tid, s)
	}
	return s[i+2], nil
}

// statFields are the fields of /proc/<pid>/stat after the command name: index 0 is field 3 (the state)
// of proc(5).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return nil, fmt.Errorf("/proc/%d/stat: nothing after the command name: %q", pid, s)
	}
	return strings.Fields(s[i+2:]), nil
}

// Proc is one process as /proc/<pid>/stat shows it: its parent's pid and its state letter ('Z' for a
// zombie, 'T' stopped).
type Proc struct {
	PPID  int
	State byte
}

// All reads every process of /proc; a process that is gone meanwhile, or whose stat cannot be parsed, is
// left out.
func All() map[int]Proc {
	entries, _ := os.ReadDir("/proc")
	all := make(map[int]Proc, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := statFields(pid)
		if err != nil || len(f) < 2 || f[0] == "" {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		all[pid] = Proc{PPID: ppid, State: f[0][0]}
	}
	return all
}

// CPUTime is the CPU time process pid has used so far, user and system, all threads (fields 14 utime
// and 15 stime of /proc/<pid>/stat; children not included).
func CPUTime(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the command name, want at least 13", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: CPU time %q: %w", pid, v, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// MemoryKiB is a memory figure of process pid from /proc/<pid>/status, in KiB: "VmRSS" (resident now),
// "VmHWM" (resident at its peak), and so on.
func MemoryKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v := strings.TrimSuffix(strings.TrimSpace(rest), " kB")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %s %q: %w", pid, field, rest, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// Threads are the thread ids of process pid; none if it is gone.
func Threads(pid int) []int {
	entries, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// Stopped reports whether every thread of process pid is stopped (SIGSTOP: state 'T', or 't' under a
// tracer). A group stop reaches each thread in turn, so the main thread alone does not tell.
func Stopped(pid int) bool {
	tids := Threads(pid)
	for _, tid := range tids {
		st, err := State(pid, tid)
		if err != nil || (st != 'T' && st != 't') {
			return false
		}
	}
	return len(tids) > 0
}

// Running reports whether process pid still runs: it exists and is not a zombie waiting to be reaped.
func Running(pid int) bool {
	st, err := State(pid, pid)
	return err == nil && st != 'Z'
}

// Children are the pids of the children of process pid, started from any of its threads.
func Children(pid int) []int {
	var pids []int
	for _, tid := range Threads(pid) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, tid))
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// Cmdline is process pid's command line; empty for a zombie, and for a child between fork and exec.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}
