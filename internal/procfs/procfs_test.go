package procfs

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/testenv"
)

// TestChildLifecycle follows a real child through running, stopped, continued and killed.
func TestChildLifecycle(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	poll := func(what string, cond func() bool) {
		t.Helper()
		testenv.EventuallyWithin(t, 10*time.Second, what, func() (bool, string) { return cond(), "" })
	}
	if !slices.Contains(Children(os.Getpid()), pid) {
		t.Errorf("Children(self) = %v, want it to contain %d", Children(os.Getpid()), pid)
	}
	// Right after the fork the child may not have exec'ed yet (an empty command line).
	poll("the child's command line", func() bool {
		args, err := Cmdline(pid)
		return err == nil && slices.Equal(args, []string{"sleep", "1000"})
	})
	if !Running(pid) || Stopped(pid) {
		t.Errorf("a sleeping child: Running %v, Stopped %v", Running(pid), Stopped(pid))
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	poll("stopped after SIGSTOP", func() bool { return Stopped(pid) })
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	poll("running after SIGCONT", func() bool { return !Stopped(pid) })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	poll("not running after SIGKILL (a zombie until reaped)", func() bool { return !Running(pid) })
	_ = cmd.Wait()
	if Running(pid) || Stopped(pid) || len(Threads(pid)) != 0 {
		t.Errorf("a reaped child: Running %v, Stopped %v, Threads %v", Running(pid), Stopped(pid), Threads(pid))
	}
}
