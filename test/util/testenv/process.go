package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a child process has to exit after SIGTERM before it is killed.
const stopGrace = 10 * time.Second

// process is a child process a helper started (kube-controller-manager, a second kube-apiserver), with
// its output in a log file. It dies with the test binary even when the binary is killed (a test timeout,
// a Ctrl-C): it is started with the parent-death signal SIGKILL, from an OS thread locked for its whole
// life, since Linux sends that signal when the forking thread, not the process, exits.
type process struct {
	name, log string
	pid       int
	done      chan struct{}
	err       error // what Wait returned; read after done is closed
	stopOnce  sync.Once
	stopErr   error
}

// startProcess starts bin with args, its stdout and stderr appended to the file logPath.
func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	p := &process{name: name, log: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, after the child
		defer close(p.done)
		defer out.Close()
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			p.err = err
			started <- fmt.Errorf("starting %s (%s): %w", name, bin, err)
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		<-p.done
		return nil, err
	}
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to stopGrace, then SIGKILL, and waits for the process to be reaped: when it
// returns, the process is gone. An exit caused by the signal is no error; an earlier exit is. Calling it
// again returns the same.
func (p *process) stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.terminate() })
	return p.stopErr
}

func (p *process) terminate() error {
	if p.exited() {
		return fmt.Errorf("%s had exited before it was stopped: %w; its log: %s\n%s", p.name, p.err, p.log, p.tail(20))
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
	var exit *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exit) {
		return fmt.Errorf("%s: %w", p.name, p.err)
	}
	return nil
}

// tail is the last n lines of the process's log, for failure messages.
func (p *process) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// forTest starts a process with start for the test t, fails t if it does not start, and stops the process
// when t ends.
func forTest[P interface{ Stop() error }](t testing.TB, start func() (P, error)) P {
	t.Helper()
	p, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Error(err)
		}
	})
	return p
}
