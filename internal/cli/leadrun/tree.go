package leadrun

import (
	"syscall"

	"github.com/fencekit/fencekit/internal/procfs"
)

// tree is the process tree of a command: its process group and every process below root, found by the
// parent pids in /proc. root is the command itself, or this process when it is a child subreaper
// (Command.Subreaper): then a process that left the command's session with setsid, and whose parent
// exited, is re-parented to this process and still found.
type tree struct {
	root, cmd int
	// reap, in subreaper mode, collects the exit status of re-parented processes (never of cmd, which
	// exec.Cmd.Wait reaps).
	reap bool
	// skip is a process below root that is not the command's (its watchdog), nor is anything below it.
	skip int
}

// alive returns the processes of the tree that still run (zombies excluded), cmd included while it runs.
// In subreaper mode it first reaps the zombies re-parented to this process.
func (t *tree) alive() []int {
	all := procfs.All()
	children := map[int][]int{}
	for pid, p := range all {
		children[p.PPID] = append(children[p.PPID], pid)
	}
	var pids []int
	queue := []int{t.root}
	if t.root != t.cmd {
		queue = append(queue, t.cmd) // the root is this process; cmd is one of its children
	}
	seen := map[int]bool{}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] || (pid == t.skip && pid != 0) {
			continue
		}
		seen[pid] = true
		queue = append(queue, children[pid]...)
		p, ok := all[pid]
		switch {
		case pid == t.root && t.root != t.cmd, !ok:
		case p.State == 'Z':
			if t.reap && pid != t.cmd && p.PPID == t.root {
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			}
		default:
			pids = append(pids, pid)
		}
	}
	return pids
}

// signal sends sig to the command's process group and to every process of the tree; a process that is
// gone already is not an error. It returns how many processes of the tree it signalled.
func (t *tree) signal(sig syscall.Signal) int {
	_ = syscall.Kill(-t.cmd, sig)
	pids := t.alive()
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	return len(pids)
}
