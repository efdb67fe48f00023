package selfstop

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/fencekit/fencekit/internal/procfs"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestMain lets the test binary play the child that stops itself.
func TestMain(m *testing.M) {
	if os.Getenv("SELFSTOP_CHILD") == "1" {
		child()
		return
	}
	os.Exit(m.Run())
}

// child stops itself from a goroutine while the main thread sleeps in the kernel (the case in which the
// goroutine used to run on past kill(2)), then reports that it was continued.
func child() {
	runtime.LockOSThread()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 4 {
			go func() {
				for {
					time.Sleep(time.Millisecond)
				}
			}()
		}
		time.Sleep(100 * time.Millisecond) // let the goroutines spread over threads
		fmt.Println("stopping")
		if err := Stop(); err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println("continued")
	}()
	<-done
}

// TestStopReturnsOnlyAfterContinue: the child's "continued" must never come before the parent has seen it
// stopped and sent SIGCONT.
func TestStopReturnsOnlyAfterContinue(t *testing.T) {
	for run := range 10 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SELFSTOP_CHILD=1")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 4)
		go func() {
			defer close(lines)
			s := bufio.NewScanner(out)
			for s.Scan() {
				lines <- s.Text()
			}
		}()
		if got := <-lines; got != "stopping" {
			t.Fatalf("run %d: child said %q, want stopping", run, got)
		}
		pid := cmd.Process.Pid
		testenv.EventuallyWithin(t, 10*time.Second, fmt.Sprintf("run %d: every thread of process %d stopped", run, pid), func() (bool, string) {
			return procfs.Stopped(pid), ""
		})
		// Stopped: anything it printed now was written before the stop took effect, and is already in the
		// pipe; the reader gets a moment to pass it on.
		select {
		case got := <-lines:
			t.Fatalf("run %d: child printed %q before it was continued", run, got)
		case <-time.After(200 * time.Millisecond):
		}
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if got := <-lines; got != "continued" {
			t.Errorf("run %d: child said %q after SIGCONT, want continued", run, got)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("run %d: child: %v", run, err)
		}
	}
}
