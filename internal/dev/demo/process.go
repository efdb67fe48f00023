package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencekit/fencekit/internal/procfs"
)

// Event is one line a worker logged (examples/worker logs JSON with log/slog), or a step of the demo.
type Event struct {
	// At is the time since the run started.
	At time.Duration
	// Worker is "W1", "W2" or "demo".
	Worker string
	// Msg is the worker's message: leading, new leader, write, pausing, resumed, stopped leading; or the
	// demo's own step.
	Msg      string
	Holder   string
	Epoch    int64
	Write    int
	Accepted *bool
	Reason   string
	Error    string
	// Op and Round are examples/controller's: which write of a reconcile (update, patch, status, delete)
	// and the round it renders.
	Op, Round string
}

// process is a running worker whose stdout events are collected.
type process struct {
	name   string
	cmd    *exec.Cmd
	start  time.Time
	stderr bytes.Buffer

	mu     sync.Mutex
	events []Event
	notify chan struct{}
	exited chan struct{}
	sink   func(Event)
}

type slogLine struct {
	Time     time.Time `json:"time"`
	Msg      string    `json:"msg"`
	Holder   string    `json:"holder"`
	Epoch    int64     `json:"epoch"`
	Write    int       `json:"write"`
	Accepted *bool     `json:"accepted"`
	Reason   string    `json:"reason"`
	Error    string    `json:"error"`
	Op       string    `json:"op"`
	Round    string    `json:"round"`
}

// startProcess starts the worker binary with args and KUBECONFIG=kubeconfig, and env added to the
// environment.
func startProcess(name, binary, kubeconfig string, env []string, start time.Time, sink func(Event), args ...string) (*process, error) {
	p := &process{name: name, start: start, notify: make(chan struct{}), exited: make(chan struct{}), sink: sink}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = append(append(os.Environ(), "KUBECONFIG="+kubeconfig), env...)
	p.cmd.Stderr = &p.stderr
	// Its own process group: a terminal's Ctrl-C reaches the demo, which stops the workers itself.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l slogLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			p.add(Event{At: l.Time.Sub(start), Worker: name, Msg: l.Msg, Holder: l.Holder, Epoch: l.Epoch,
				Write: l.Write, Accepted: l.Accepted, Reason: l.Reason, Error: l.Error, Op: l.Op, Round: l.Round})
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) add(e Event) {
	p.mu.Lock()
	p.events = append(p.events, e)
	close(p.notify)
	p.notify = make(chan struct{})
	p.mu.Unlock()
	if p.sink != nil {
		p.sink(e)
	}
}

// waitFor waits until the worker has logged an event matching match and returns it.
func (p *process) waitFor(ctx context.Context, timeout time.Duration, what string, match func(Event) bool) (Event, error) {
	deadline := time.After(timeout)
	seen := 0
	for {
		p.mu.Lock()
		events, notify := p.events, p.notify
		p.mu.Unlock()
		for ; seen < len(events); seen++ {
			if match(events[seen]) {
				return events[seen], nil
			}
		}
		select {
		case <-notify:
		case <-p.exited:
			// Drain what was logged before the exit, then give up.
			p.mu.Lock()
			n := len(p.events)
			p.mu.Unlock()
			if n == seen {
				return Event{}, fmt.Errorf("worker %s exited before %s: %s", p.name, what, strings.TrimSpace(lastLines(p.stderr.String(), 5)))
			}
		case <-deadline:
			return Event{}, fmt.Errorf("worker %s: no %s within %s", p.name, what, timeout)
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// stopped reports whether the process is stopped.
func (p *process) stopped() bool { return procfs.Stopped(p.cmd.Process.Pid) }

func (p *process) signal(sig syscall.Signal) error { return syscall.Kill(p.cmd.Process.Pid, sig) }

// children are the pids of the process's children.
func (p *process) children() []int { return procfs.Children(p.cmd.Process.Pid) }

// terminate stops the worker gracefully (it releases its lease), and kills it if it does not exit in time.
func (p *process) terminate() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.signal(syscall.SIGCONT) // a stopped process cannot handle SIGTERM
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.signal(syscall.SIGKILL)
		<-p.exited
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
