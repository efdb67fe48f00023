package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/internal/procfs"
)

// SecondAPIServerStartTimeout bounds how long StartSecondAPIServer waits for /readyz.
const SecondAPIServerStartTimeout = 60 * time.Second

// APIServer is a second kube-apiserver on the same etcd and certificates as an Env's: clients of either see
// the same objects, but each apiserver has its own watch cache, informers (admission's, RBAC's) and
// webhook clients, as two control-plane nodes of one cluster do.
type APIServer struct {
	// Config is an admin rest.Config for it: the Env's admin credentials, its address.
	Config *rest.Config
	// Port is its secure port on 127.0.0.1.
	Port int
	proc *process
	dir  string
}

// SecondAPIServer starts a second kube-apiserver (StartSecondAPIServer) for the test t and stops it when
// t ends.
func (e *Env) SecondAPIServer(t testing.TB) *APIServer {
	t.Helper()
	return forTest(t, e.StartSecondAPIServer)
}

// StartSecondAPIServer starts a copy of e's kube-apiserver, with its exact command line (read from
// /proc/<pid>/cmdline of the test process's child) but another --secure-port, and returns once its /readyz
// answers. Stop it with Stop; it also dies with the test binary.
func (e *Env) StartSecondAPIServer() (a *APIServer, err error) {
	argv, err := e.apiServerCmdline()
	if err != nil {
		return nil, err
	}
	port, err := PickFreePort()
	if err != nil {
		return nil, err
	}
	args := slices.Clone(argv[1:])
	for i, arg := range args {
		if strings.HasPrefix(arg, "--secure-port=") {
			args[i] = "--secure-port=" + strconv.Itoa(port)
		}
	}
	dir, err := os.MkdirTemp("", "fencekit-apiserver2-")
	if err != nil {
		return nil, err
	}
	a = &APIServer{Port: port, dir: dir}
	defer func() {
		if err != nil {
			_ = a.Stop()
		}
	}()
	if a.proc, err = startProcess("the second kube-apiserver", filepath.Join(dir, "kube-apiserver.log"), argv[0], args...); err != nil {
		return a, err
	}
	a.Config = rest.CopyConfig(e.Config)
	a.Config.Host = "https://127.0.0.1:" + strconv.Itoa(port)
	if err := a.waitReady(); err != nil {
		return a, err
	}
	return a, nil
}

// apiServerCmdline is the command line of e's kube-apiserver: the child of this process that runs the
// Env's kube-apiserver binary on the Env's secure port.
func (e *Env) apiServerCmdline() ([]string, error) {
	s := e.Environment.ControlPlane.APIServer
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		return nil, err
	}
	want := "--secure-port=" + u.Port()
	for _, pid := range procfs.Children(os.Getpid()) {
		argv, err := procfs.Cmdline(pid)
		if err != nil || len(argv) == 0 || filepath.Base(argv[0]) != filepath.Base(s.Path) {
			continue
		}
		if slices.Contains(argv, want) {
			return argv, nil
		}
	}
	return nil, fmt.Errorf("found no child of this process running %s with %s", s.Path, want)
}

// Log is the path of the second apiserver's log, kept until Stop.
func (a *APIServer) Log() string { return a.proc.log }

// Stop stops the second apiserver, waits until it has exited and removes its files.
func (a *APIServer) Stop() error {
	var err error
	if a.proc != nil {
		err = a.proc.stop()
	}
	_ = os.RemoveAll(a.dir)
	return err
}

func (a *APIServer) waitReady() error {
	dc, err := discovery.NewDiscoveryClientForConfig(a.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), SecondAPIServerStartTimeout)
	defer cancel()
	var last string
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if a.proc.exited() {
			return false, fmt.Errorf("exited: %w", a.proc.err)
		}
		body, err := dc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // polling on: the error is kept in last
		}
		return string(body) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("the second kube-apiserver on port %d is not ready after %v (last: %s): %w; its log (%s) ends:\n%s",
			a.Port, SecondAPIServerStartTimeout, last, err, a.proc.log, a.proc.tail(30))
	}
	return nil
}
