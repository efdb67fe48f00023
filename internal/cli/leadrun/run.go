package leadrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/elector"
)

// DefaultGrace is how long a command has to exit after SIGTERM before it gets SIGKILL.
const DefaultGrace = 5 * time.Second

// KillTimeout is how long Run waits, after SIGKILL, for the command's tree to be gone: a process in an
// uninterruptible sleep (a hung NFS mount) ends only when the kernel lets it. Run has the elector wait
// Command.Grace plus KillTimeout, at least, before it releases the Lease or competes again.
const KillTimeout = 10 * time.Second

// Command is what Run starts while leading.
type Command struct {
	// Args is the command and its arguments; required.
	Args []string
	// Env is added to the process's own environment, before the token's variables.
	Env []string
	// Stdin, Stdout and Stderr default to the process's own.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Grace is how long the command has to exit after SIGTERM before SIGKILL. Default DefaultGrace. The
	// Lease is not renewed while the command stops: SIGKILL comes at the last safe-work deadline if that is
	// sooner, and at once when the Lease is another's (elector.ErrLeaseTaken).
	Grace time.Duration
	// AcquireTimeout bounds the wait for leadership: Run returns an error wrapping ErrNotAcquired when it
	// has not led within it. 0 waits for ever.
	AcquireTimeout time.Duration
	// Subreaper makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER) for the whole run, so
	// that a descendant of the command that left its session (setsid) and lost its parent is re-parented
	// here, and stopped with the rest of the tree. Set it only in a process that starts no other child
	// processes (fencekit run): every process below this one is then taken for the command's.
	Subreaper bool
	// Watchdog, if set, is a fencekit binary that Run starts beside the command as its watchdog
	// (RunWatchdog, WatchdogEnv): a process of its own that kills the command's tree with SIGKILL at the
	// safe-work deadline plus half the SafetyMargin, unless this process set it later meanwhile, as it
	// does after every renewal and while it stops the command. It ends a command whose supervisor is
	// paused, starved of CPU or killed, before the Lease can expire.
	Watchdog string
	// Again makes Run stand by when a term ends while the command runs (leadership lost, the safe-work
	// deadline passed) instead of returning: once the command's tree is gone it competes for the Lease
	// again and runs the command anew on each new term, with that term's token. Run still returns when
	// the command exits on its own, when ctx ends, and when a tree outlives its SIGKILL.
	Again bool
}

// ExitError is returned by Run when the command did not exit with status 0: Code is what `fencekit run`
// exits with (the command's status, or 128 + the signal that ended it, as a shell reports it).
type ExitError struct {
	Code int
	// Why says how the command ended: on its own, or stopped because leadership ended (and why).
	Why string
	// treeLeft is set when processes of the command's tree still ran KillTimeout after SIGKILL.
	treeLeft bool
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("command exited with status %d: %s", e.Code, e.Why)
}

// Run competes for the Lease with cfg (whose OnStartedLeading it sets) and, once it leads, runs cmd with
// the token in its environment (Environ). It returns when the command has exited: nil for status 0, an
// *ExitError otherwise. When leadership ends first (the safe-work deadline passed, leadership was lost),
// the command's process tree (its process group and every descendant: Command.Subreaper adds those that
// left with setsid) gets SIGTERM and, after cmd.Grace or at the last safe-work deadline if sooner,
// SIGKILL; when the Lease is another's, SIGKILL at once. When the command exits on its own, what
// it left running is stopped the same way, before the Lease is released. When ctx ends first, the command
// is stopped the same way and the Lease released. The Lease is released, and never competed for again,
// only once the whole tree is gone: Run raises cfg.ReleaseTimeout to cmd.Grace plus KillTimeout when it
// is shorter. Run starts the command at most once, unless cmd.Again: a leadership that ends, however,
// ends Run. With cmd.Again, a term that ends while the command runs is followed, once the tree is gone, by
// another competition, and the command runs again on the next term; never two at once.
//
// Before leading, Run gives up with a *PermanentError when the apiserver answers one kind of request
// PermanentAttempts times in a row with a permanent error (IsPermanent), and with an error wrapping ErrNotAcquired when
// cmd.AcquireTimeout passes.
func Run(ctx context.Context, cfg elector.Config, cmd Command, opts ...elector.Option) error {
	if len(cmd.Args) == 0 {
		return errors.New("leadrun: no command to run")
	}
	if cmd.Grace <= 0 {
		cmd.Grace = DefaultGrace
	}
	if cmd.Subreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("becoming a child subreaper: %w", err)
		}
	}
	if least := cmd.Grace + KillTimeout; cfg.ReleaseTimeout < least {
		cfg.ReleaseTimeout = least
	}
	log := logr.FromContextOrDiscard(ctx)
	runCtx, api, stopElector := guard(ctx, &cfg, cmd.AcquireTimeout)
	defer stopElector(nil)
	done := make(chan error, 1)
	var started atomic.Bool
	// running is held while a command's tree may run: a term whose predecessor's tree is not known to be
	// gone never starts another.
	var running sync.Mutex
	var last lastTerm
	var e *elector.Elector
	slack := cfg.SafetyMargin
	if slack <= 0 {
		slack = elector.DefaultSafetyMargin
	}
	slack /= 2
	// standBy reports whether a term that ended with the command's result err is followed by another.
	standBy := func(lctx context.Context, err error) bool {
		var ee *ExitError
		treeLeft := errors.As(err, &ee) && ee.treeLeft
		return cmd.Again && lctx.Err() != nil && ctx.Err() == nil && !treeLeft
	}
	cfg.OnStartedLeading = func(lctx context.Context, t elector.Token) {
		if !running.TryLock() || (started.Swap(true) && !cmd.Again) {
			// A term after the command's: never a second command, even one started while the first's
			// tree would still run.
			stopElector(nil)
			return
		}
		defer running.Unlock()
		api.setLeading(true)
		err := runWhileLeading(lctx, log, cmd, t, e.Deadline, slack, func() {
			if !standBy(lctx, nil) {
				stopElector(nil)
			}
		})
		if standBy(lctx, err) {
			// The elector competes again once this returns (it waits for it up to ReleaseTimeout, which
			// covers the command's stop).
			last.set(t, err)
			log.Info("Standing by for the next term", "token", t.String(), "command", fmt.Sprint(err))
			return
		}
		done <- err
		stopElector(nil) // the command is over: release the Lease and return
		<-lctx.Done()
	}
	var err error
	e, err = elector.New(cfg, opts...)
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
	}
	if err := gaveUp(runCtx); err != nil {
		return err
	}
	if t, err := last.get(); t.Epoch != 0 {
		return fmt.Errorf("stopped while standing by for lease %s/%s after the term of epoch %d (its command: %s): %w", cfg.Namespace, cfg.Name, t.Epoch, fmt.Sprint(err), context.Cause(ctx))
	}
	return fmt.Errorf("stopped before leading lease %s/%s: %w", cfg.Namespace, cfg.Name, context.Cause(ctx))
}

// lastTerm is the last term whose command Run stopped and stood by after (Command.Again).
type lastTerm struct {
	mu    sync.Mutex
	token elector.Token
	err   error
}

func (l *lastTerm) set(t elector.Token, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.token, l.err = t, err
}

func (l *lastTerm) get() (elector.Token, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token, l.err
}

// guard sets cfg's client to one whose answers are followed and returns the context to run the elector
// with: it ends with a *PermanentError after PermanentAttempts permanent errors in a row to one kind of
// request while not leading,
// with ErrNotAcquired when timeout (if positive) passes before the first leadership, and with stop.
func guard(ctx context.Context, cfg *elector.Config, timeout time.Duration) (context.Context, *apiState, context.CancelCauseFunc) {
	runCtx, cancel := context.WithCancelCause(ctx)
	lease := cfg.Namespace + "/" + cfg.Name
	api := &apiState{lease: lease, giveUp: cancel}
	cs := cfg.Client
	cfg.Client = api.observe(cs)
	if timeout <= 0 {
		return runCtx, api, cancel
	}
	timer := time.AfterFunc(timeout, func() {
		if api.everLed() {
			return
		}
		holder := ""
		rctx, done := context.WithTimeout(runCtx, 2*time.Second)
		defer done()
		if l, err := cs.CoordinationV1().Leases(cfg.Namespace).Get(rctx, cfg.Name, metav1.GetOptions{}); err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != "" {
			holder = fmt.Sprintf(" (held by %q)", *l.Spec.HolderIdentity)
		}
		cancel(fmt.Errorf("%w: not leading Lease %s%s after --timeout %s", ErrNotAcquired, lease, holder, timeout))
	})
	return runCtx, api, func(cause error) { timer.Stop(); cancel(cause) }
}

// gaveUp is the reason guard's context ended, if guard ended it.
func gaveUp(runCtx context.Context) error {
	cause := context.Cause(runCtx)
	var pe *PermanentError
	if errors.As(cause, &pe) || errors.Is(cause, ErrNotAcquired) {
		return cause
	}
	return nil
}

// runWhileLeading starts cmd with t and stops its process tree when lctx ends or after it exits. ended is
// called as soon as the command's term is over (before the tree is stopped), so that the elector does not
// compete again meanwhile. deadline is the elector's safe-work deadline (zero once the term is over): the
// tree is gone by the last one read, whatever cmd.Grace, since the Lease is not renewed while it stops;
// the watchdog (cmd.Watchdog) kills the tree slack after it.
func runWhileLeading(lctx context.Context, log logr.Logger, cmd Command, t elector.Token, deadline func() time.Time, slack time.Duration, ended func()) error {
	c := exec.Command(cmd.Args[0], cmd.Args[1:]...)
	c.Env = append(append(os.Environ(), cmd.Env...), Environ(t)...)
	c.Stdin, c.Stdout, c.Stderr = orDefault(cmd.Stdin, os.Stdin), orWriter(cmd.Stdout, os.Stdout), orWriter(cmd.Stderr, os.Stderr)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own process group, signalled as a whole
	if err := c.Start(); err != nil {
		// As a shell reports it: 126 for a command found but not executable, 127 for one not found.
		code := 127
		if errors.Is(err, fs.ErrPermission) {
			code = 126
		}
		return &ExitError{Code: code, Why: fmt.Sprintf("starting %q: %v", cmd.Args[0], err)}
	}
	log.Info("Started the command", "token", t.String(), "pid", c.Process.Pid)
	tr := &tree{root: c.Process.Pid, cmd: c.Process.Pid}
	if cmd.Subreaper {
		tr.root, tr.reap = os.Getpid(), true
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()

	// last is the latest safe-work deadline read: the time the tree must be gone by once the term ends.
	var lastMu sync.Mutex
	last := deadline()
	lastDeadline := func() time.Time {
		lastMu.Lock()
		defer lastMu.Unlock()
		return last
	}
	var wd *watchdog
	if cmd.Watchdog != "" {
		var err error
		wd, err = startWatchdog(cmd.Watchdog, c.Process.Pid, last.Add(slack))
		if err != nil {
			_ = tr.signal(syscall.SIGKILL)
			if werr := <-exited; werr != nil && !killed(werr) {
				log.Error(werr, "The command, killed as its watchdog could not start, ended otherwise")
			}
			return &ExitError{Code: 1, Why: err.Error()}
		}
		tr.skip = wd.pid()
		defer wd.stop()
	}
	// Follow the renewals until the command's term is over.
	follow, stopFollowing := context.WithCancel(lctx)
	defer stopFollowing()
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-follow.Done():
				return
			case <-tick.C:
				if d := deadline(); !d.IsZero() {
					lastMu.Lock()
					last = d
					lastMu.Unlock()
					if wd != nil {
						wd.set(d.Add(slack))
					}
				}
			}
		}
	}()
	stopping := ended
	ended = func() {
		stopFollowing()
		stopping()
	}

	var waitErr error
	// result is the command's result; a SIGKILL of the watchdog's is said as such.
	result := func(why string) error {
		if wd != nil && wd.fired() && killed(waitErr) {
			why = byWatchdog
		}
		return exitError(waitErr, why)
	}
	exitedAlready := false
	why := "it exited on its own"
	select {
	case waitErr = <-exited:
		exitedAlready = true
		if len(tr.alive()) == 0 {
			return result(why)
		}
		log.Info("Stopping what the command left running", "token", t.String())
	case <-lctx.Done():
		why = fmt.Sprintf("leadership ended (%v)", context.Cause(lctx))
		log.Info("Stopping the command", "token", t.String(), "reason", why)
	}
	ended()
	// kill sends SIGKILL to the tree; if the watchdog's time has already passed, its SIGKILL came first.
	kill := func(why string) error {
		if wd != nil && wd.fired() {
			why = byWatchdog
		}
		var err error
		if waitErr, err = killTree(tr, exited, exitedAlready, waitErr, why); err != nil {
			return err
		}
		return exitError(waitErr, why)
	}
	if errors.Is(context.Cause(lctx), elector.ErrLeaseTaken) {
		// Another holder may run its command now: no grace.
		return kill("killed with SIGKILL at once: " + why)
	}
	// Nobody renews the Lease from here: the tree gets SIGKILL after its grace, or at the last safe-work
	// deadline if that comes first, and the watchdog's time is the same plus the slack.
	stopAt := time.Now()
	killAt, killWhy := stopAt.Add(cmd.Grace), fmt.Sprintf("killed with SIGKILL %s after SIGTERM: %s", cmd.Grace, why)
	if d := lastDeadline(); d.Before(killAt) {
		killAt = d
		killWhy = fmt.Sprintf("killed with SIGKILL %s after SIGTERM, at the safe-work deadline, before its grace of %s ended: %s",
			max(d.Sub(stopAt), 0).Round(time.Millisecond), cmd.Grace, why)
	}
	if wd != nil {
		wd.set(killAt.Add(slack))
	}
	tr.signal(syscall.SIGTERM)
	grace := time.NewTimer(time.Until(killAt))
	defer grace.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for !exitedAlready || len(tr.alive()) > 0 {
		select {
		case waitErr = <-exited:
			exitedAlready = true
		case <-poll.C:
		case <-grace.C:
			return kill(killWhy)
		}
	}
	if why == "it exited on its own" {
		return result(why)
	}
	return result("stopped with SIGTERM: " + why)
}

// byWatchdog is what a command killed by its watchdog was ended by.
const byWatchdog = "killed with SIGKILL by its watchdog at the safe-work deadline: fencekit run could not stop it in time (paused, or starved of CPU)"

// killTree sends SIGKILL to the tree until nothing of it runs, and returns the command's Wait error; after
// KillTimeout, an error that names what still runs.
func killTree(tr *tree, exited <-chan error, ended bool, waitErr error, why string) (error, error) {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	deadline := time.NewTimer(KillTimeout)
	defer deadline.Stop()
	for tr.signal(syscall.SIGKILL) > 0 || !ended {
		select {
		case waitErr = <-exited:
			ended = true
		case <-poll.C:
		case <-deadline.C:
			return waitErr, &ExitError{Code: 128 + int(syscall.SIGKILL), treeLeft: true, Why: fmt.Sprintf("%s; processes %v still run %s after SIGKILL (uninterruptible sleep?)", why, tr.alive(), KillTimeout)}
		}
	}
	return waitErr, nil
}

// killed reports whether the command's Wait error says SIGKILL ended it.
func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
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
