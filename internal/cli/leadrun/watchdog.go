package leadrun

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// WatchdogEnv, set in a process's environment, makes the fencekit binary run as a command's watchdog
// (RunWatchdog) instead of its CLI. Its value is "PGID SUPERVISOR": the command's process group and the
// pid of the `fencekit run` that started it.
const WatchdogEnv = "FENCEKIT_WATCHDOG"

// watchdog is the supervisor's end of a command's watchdog: a process of its own (its own process group,
// so that neither a terminal's Ctrl-C nor a stop of the supervisor's group reaches it) that kills the
// command's tree at the time the supervisor last set, unless set again before. The supervisor sets it to
// the safe-work deadline plus a slack after every renewal, and further while it stops the command itself:
// the watchdog kills only when the supervisor cannot (paused, starved of CPU, killed).
type watchdog struct {
	mu   sync.Mutex
	pipe *os.File
	cmd  *exec.Cmd
	at   time.Time
	// passed: a kill time set had passed when a later one replaced it.
	passed bool
}

// startWatchdog runs exe (a fencekit binary) as the watchdog of process group pgid, to kill it at at.
func startWatchdog(exe string, pgid int, at time.Time) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	c := exec.Command(exe)
	c.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d", WatchdogEnv, pgid, os.Getpid()))
	c.ExtraFiles = []*os.File{r} // fd 3
	c.Stderr = os.Stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("starting the command's watchdog (%s): %w", exe, err)
	}
	_ = r.Close()
	wd := &watchdog{pipe: w, cmd: c}
	wd.set(at)
	return wd, nil
}

// pid is the watchdog's process id.
func (w *watchdog) pid() int { return w.cmd.Process.Pid }

// set moves the kill time to at, if it differs from the last one sent.
func (w *watchdog) set(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.Equal(w.at) {
		return
	}
	if !w.at.IsZero() && !w.at.After(time.Now()) {
		w.passed = true
	}
	w.at = at
	_, _ = fmt.Fprintf(w.pipe, "%d\n", at.UnixNano())
}

// fired reports whether a kill time set has passed: the watchdog has killed the tree.
func (w *watchdog) fired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.passed || !w.at.After(time.Now())
}

// stop stands the watchdog down (the tree is gone). It does not wait for the watchdog, which may itself be
// paused; its exit is collected in the background.
func (w *watchdog) stop() {
	w.mu.Lock()
	_, _ = io.WriteString(w.pipe, "stop\n")
	_ = w.pipe.Close()
	w.mu.Unlock()
	go func() { _ = w.cmd.Wait() }()
}

// RunWatchdog is the watchdog's process (WatchdogEnv): it reads kill times (Unix nanoseconds, one per
// line) from in, and kills the command's tree (process group pgid and every process below supervisor but
// itself) with SIGKILL when the last one passes. It ends when it reads "stop"; when in ends without it
// (the supervisor is gone), it kills the tree at once. It returns the exit status.
func RunWatchdog(spec string, in io.Reader) int {
	var pgid, supervisor int
	if _, err := fmt.Sscan(spec, &pgid, &supervisor); err != nil || pgid <= 1 || supervisor <= 1 {
		fmt.Fprintf(os.Stderr, "fencekit watchdog: %s=%q: want the command's process group and the supervisor's pid\n", WatchdogEnv, spec)
		return exitWatchdogUsage
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	lines := make(chan string)
	go func() {
		defer close(lines)
		for s := bufio.NewScanner(in); s.Scan(); {
			lines <- strings.TrimSpace(s.Text())
		}
	}()
	tr := &tree{root: supervisor, cmd: pgid, skip: os.Getpid()}
	var timer <-chan time.Time
	for {
		var l string
		var ok bool
		select {
		case l, ok = <-lines:
		case <-timer:
			// Resumed from a pause with its supervisor, it may find the time passed and a later one (or a
			// stop) already written: read what is there first.
			select {
			case l, ok = <-lines:
				timer = time.After(0)
			case <-time.After(20 * time.Millisecond):
				killAll(tr, "its safe-work deadline passed and its supervisor did not stop it")
				return 0
			}
		}
		switch {
		case !ok:
			if os.Getppid() != supervisor {
				// Its supervisor exited and its pid may be another process's by now: kill below the
				// command only.
				tr.root = pgid
			}
			killAll(tr, "its supervisor is gone")
			return 0
		case l == "stop":
			return 0
		}
		n, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fencekit watchdog: %q is not a time\n", l)
			continue
		}
		timer = time.After(time.Until(time.Unix(0, n)))
	}
}

// exitWatchdogUsage is the watchdog's exit status for a bad WatchdogEnv (EX_USAGE).
const exitWatchdogUsage = 64

// killAll sends SIGKILL to the tree until nothing of it runs (at most KillTimeout).
func killAll(tr *tree, why string) {
	n := 0
	for end := time.Now().Add(KillTimeout); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		k := tr.signal(syscall.SIGKILL)
		if k == 0 {
			break
		}
		n = max(n, k)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "fencekit watchdog: killed the command (process group %d, %d processes) with SIGKILL: %s\n", tr.cmd, n, why)
	}
}
