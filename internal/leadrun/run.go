package leadrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/fencekit/fencekit/pkg/elector"
)

// DefaultGrace is how long a command has to exit after SIGTERM before it gets SIGKILL.
const DefaultGrace = 5 * time.Second

// Command is what Run starts while leading.
type Command struct {
	// Args is the command and its arguments; required.
	Args []string
	// Env is added to the process's own environment, before the token's variables.
	Env []string
	// Stdin, Stdout and Stderr default to the process's own.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Grace is how long the command has to exit after SIGTERM before SIGKILL. Default DefaultGrace.
	Grace time.Duration
}

// ExitError is returned by Run when the command did not exit with status 0: Code is what `fencekit run`
// exits with (the command's status, or 128 + the signal that ended it, as a shell reports it).
type ExitError struct {
	Code int
	// Why says how the command ended: on its own, or stopped because leadership ended (and why).
	Why string
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("command exited with status %d: %s", e.Code, e.Why)
}

// Run competes for the Lease with cfg (whose OnStartedLeading it sets) and, once it leads, runs cmd with
// the token in its environment (Environ). It returns when the command has exited: nil for status 0, an
// *ExitError otherwise. When leadership ends first (the safe-work deadline passed, leadership was lost),
// the command gets SIGTERM and, after cmd.Grace, SIGKILL; its process group is signalled, so that the
// children of a shell script stop too. When ctx ends first, the command is stopped the same way and the
// Lease released. Run starts the command at most once.
func Run(ctx context.Context, cfg elector.Config, cmd Command, opts ...elector.Option) error {
	if len(cmd.Args) == 0 {
		return errors.New("leadrun: no command to run")
	}
	if cmd.Grace <= 0 {
		cmd.Grace = DefaultGrace
	}
	log := logr.FromContextOrDiscard(ctx)
	runCtx, stopElector := context.WithCancel(ctx)
	defer stopElector()
	done := make(chan error, 1)
	cfg.OnStartedLeading = func(lctx context.Context, t elector.Token) {
		err := runWhileLeading(lctx, log, cmd, t)
		done <- err
		stopElector() // the command is over: release the Lease and return
		<-lctx.Done()
	}
	e, err := elector.New(cfg, opts...)
	if err != nil {
		return err
	}
	if err := e.Run(runCtx); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	default:
		return fmt.Errorf("stopped before leading lease %s/%s: %w", cfg.Namespace, cfg.Name, context.Cause(ctx))
	}
}

// runWhileLeading starts cmd with t and stops it when lctx ends.
func runWhileLeading(lctx context.Context, log logr.Logger, cmd Command, t elector.Token) error {
	c := exec.Command(cmd.Args[0], cmd.Args[1:]...)
	c.Env = append(append(os.Environ(), cmd.Env...), Environ(t)...)
	c.Stdin, c.Stdout, c.Stderr = orDefault(cmd.Stdin, os.Stdin), orWriter(cmd.Stdout, os.Stdout), orWriter(cmd.Stderr, os.Stderr)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group, signalled as a whole
	if err := c.Start(); err != nil {
		return &ExitError{Code: 127, Why: fmt.Sprintf("starting %q: %v", cmd.Args[0], err)}
	}
	log.Info("Started the command", "token", t.String(), "pid", c.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()

	var why string
	select {
	case err := <-exited:
		return exitError(err, "it exited on its own")
	case <-lctx.Done():
		why = fmt.Sprintf("leadership ended (%v)", context.Cause(lctx))
	}
	log.Info("Stopping the command", "token", t.String(), "reason", why)
	signalGroup(c.Process.Pid, syscall.SIGTERM)
	timer := time.NewTimer(cmd.Grace)
	defer timer.Stop()
	select {
	case err := <-exited:
		return exitError(err, "stopped with SIGTERM: "+why)
	case <-timer.C:
	}
	signalGroup(c.Process.Pid, syscall.SIGKILL)
	return exitError(<-exited, fmt.Sprintf("killed with SIGKILL %s after SIGTERM: %s", cmd.Grace, why))
}

// exitError turns the command's Wait error into Run's result.
func exitError(err error, why string) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return &ExitError{Code: 1, Why: fmt.Sprintf("%s: %v", why, err)}
	}
	code := ee.ExitCode()
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code == 0 {
		return nil
	}
	return &ExitError{Code: code, Why: why}
}

// signalGroup signals the process group led by pid; a group that is gone already is not an error.
func signalGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}

func orDefault(r, def io.Reader) io.Reader {
	if r == nil {
		return def
	}
	return r
}

func orWriter(w, def io.Writer) io.Writer {
	if w == nil {
		return def
	}
	return w
}
