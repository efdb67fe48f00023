package chaos

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/internal/procfs"
)

// proc is one worker process: an incarnation of worker idx.
type proc struct {
	idx, incarnation int
	identity         string
	clockFile        string // the rate of its elector's clock, read on SIGUSR2 (F8)
	cmd              *exec.Cmd
	exited           chan struct{}
}

func startProc(binary string, idx, incarnation int, kubeconfig, logPath string, f WorkerFlags) (*proc, error) {
	p := &proc{idx: idx, incarnation: incarnation, identity: f.Identity, clockFile: f.ClockFile, exited: make(chan struct{})}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(binary, f.Args()...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	// Its own process group: a terminal's Ctrl-C reaches the harness, which stops the workers itself.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting worker %s: %w", p.identity, err)
	}
	go func() {
		_ = p.cmd.Wait()
		_ = log.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *proc) signal(sig syscall.Signal) error { return syscall.Kill(p.cmd.Process.Pid, sig) }

// stopped reports whether the process is stopped.
func (p *proc) stopped() bool { return procfs.Stopped(p.cmd.Process.Pid) }

// wait waits up to timeout for the process to exit.
func (p *proc) wait(timeout time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

// terminate ends the process gracefully (it releases its Lease), killing it if it does not exit in time.
func (p *proc) terminate() {
	if !p.alive() {
		return
	}
	_ = p.signal(syscall.SIGCONT) // a stopped process cannot handle SIGTERM
	_ = p.signal(syscall.SIGTERM)
	if !p.wait(10 * time.Second) {
		_ = p.signal(syscall.SIGKILL)
		<-p.exited
	}
}

// nice sets the niceness of every thread of the process (on Linux, setpriority applies to one thread).
func (p *proc) nice(n int) {
	for _, tid := range procfs.Threads(p.cmd.Process.Pid) {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, n)
	}
}
