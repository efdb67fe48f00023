package procfs_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/procfs"
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
		const within = 10 * time.Second
		for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: never happened in %v", what, within)
			}
		}
	}
	if !slices.Contains(procfs.Children(os.Getpid()), pid) {
		t.Errorf("procfs.Children(self) = %v, want it to contain %d", procfs.Children(os.Getpid()), pid)
	}
	// Right after the fork the child may not have exec'ed yet (an empty command line).
	poll("the child's command line", func() bool {
		args, err := procfs.Cmdline(pid)
		return err == nil && slices.Equal(args, []string{"sleep", "1000"})
	})
	if !procfs.Running(pid) || procfs.Stopped(pid) {
		t.Errorf("a sleeping child: Running %v, Stopped %v", procfs.Running(pid), procfs.Stopped(pid))
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	poll("stopped after SIGSTOP", func() bool { return procfs.Stopped(pid) })
	if p, ok := procfs.All()[pid]; !ok || p.PPID != os.Getpid() || p.State != 'T' {
		t.Errorf("procfs.All()[%d] = %+v, %v; want parent %d, state T", pid, p, ok, os.Getpid())
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	poll("running after SIGCONT", func() bool { return !procfs.Stopped(pid) })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	poll("not running after SIGKILL (a zombie until reaped)", func() bool { return !procfs.Running(pid) })
	if p := procfs.All()[pid]; p.State != 'Z' {
		t.Errorf("procfs.All()[%d] = %+v after SIGKILL, want state Z until reaped", pid, p)
	}
	_ = cmd.Wait()
	if procfs.Running(pid) || procfs.Stopped(pid) || len(procfs.Threads(pid)) != 0 {
		t.Errorf("a reaped child: Running %v, Stopped %v, Threads %v", procfs.Running(pid), procfs.Stopped(pid), procfs.Threads(pid))
	}
}

// TestCPUTimeAndMemory reads this process's own figures: CPU time grows while it spins, and its resident
// memory is at least the buffer it touched.
func TestCPUTimeAndMemory(t *testing.T) {
	pid := os.Getpid()
	before, err := procfs.CPUTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for x := 0; ; x++ { // spin until the kernel has accounted some CPU time: ticks are 10 ms
		after, err := procfs.CPUTime(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if x > 1e10 {
			t.Fatalf("CPUTime stayed at %v", before)
		}
	}
	rss, err := procfs.MemoryKiB(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	if rss < 64<<10 {
		t.Errorf("VmRSS = %d KiB after touching 64 MiB", rss)
	}
	if buf[len(buf)-1] != byte(len(buf)-1) {
		t.Fatal("buffer lost")
	}
	if _, err := procfs.MemoryKiB(pid, "NoSuchField"); err == nil || !strings.Contains(err.Error(), "NoSuchField") {
		t.Errorf("procfs.MemoryKiB(NoSuchField) error = %v, want one naming the field", err)
	}
}
