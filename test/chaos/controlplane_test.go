package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/procfs"
)

// restarter restarts the control plane's processes (F6, F7). envtest cannot restart kube-apiserver
// without new certificates and users, so the restarter stops the process with SIGTERM and runs the same
// command line again: same ports, certificates, users and etcd data directory. It only touches
// processes that are children of this test process.
type restarter struct {
	mu      sync.Mutex
	started []*exec.Cmd
}

func newRestarter(t *testing.T) *restarter {
	r := &restarter{}
	t.Cleanup(r.stop)
	return r
}

func (r *restarter) restart(ctx context.Context, component string, down time.Duration) error {
	pid, args, err := child(component)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return err
	}
	if err := waitGone(ctx, pid, 30*time.Second); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if err := waitGone(ctx, pid, 10*time.Second); err != nil {
			return err
		}
	}
	if err := sleep(ctx, down); err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s again: %w", component, err)
	}
	go func() { _ = cmd.Wait() }()
	r.mu.Lock()
	r.started = append(r.started, cmd)
	r.mu.Unlock()
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		last = env.Client.List(ctx, &corev1.NamespaceList{}, client.Limit(1))
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the apiserver did not answer within 90s of restarting %s: %w", component, last)
	}
	return nil
}

// stop ends the processes the restarter started, before envtest stops (and finds its own exited).
func (r *restarter) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.started {
		if c.ProcessState == nil {
			_ = c.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, c := range r.started {
		_ = waitGone(context.Background(), c.Process.Pid, 30*time.Second)
	}
}

// child finds this process's child whose executable is named component, and its command line.
func child(component string) (int, []string, error) {
	for _, pid := range procfs.Children(os.Getpid()) {
		args, err := procfs.Cmdline(pid)
		if err == nil && len(args) > 0 && filepath.Base(args[0]) == component {
			return pid, args, nil
		}
	}
	return 0, nil, fmt.Errorf("no %s process started by this test process", component)
}

func waitGone(ctx context.Context, pid int, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return !procfs.Running(pid), nil
	})
}
