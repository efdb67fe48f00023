package elector_test

import (
	"reflect"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencekit/fencekit/pkg/elector"
)

// The apiserver is stopped and started again mid-lease (not in parallel with other tests: they share it).
// The leader keeps its leadership (same epoch, context not cancelled) because the Lease did not expire, its
// renewals resume, and the standby's watch recovers: it takes over at once when the leader releases.
func TestAPIServerRestartMidLease(t *testing.T) {
	ns := env.Namespace(t)
	h := newHistory()
	long := func(id string) elector.Config {
		cfg := h.config(t, ns, id)
		cfg.LeaseDuration = 30 * time.Second // longer than the restart
		cfg.RenewDeadline = 20 * time.Second
		cfg.RetryPeriod = time.Second
		cfg.SafetyMargin = time.Second
		return cfg
	}
	a := start(t, long("a"))
	first := h.wait(t, 15*time.Second)
	if first.Holder != "a" {
		t.Fatalf("first leader %v", first)
	}
	seen := make(chan struct{}, 10)
	cfgB := long("b")
	cfgB.OnNewLeader = func(string, int64) { seen <- struct{}{} }
	start(t, cfgB)
	select {
	case <-seen: // the standby's watch is established
	case <-time.After(15 * time.Second):
		t.Fatal("the standby did not observe the leader")
	}

	apiServer := env.Environment.ControlPlane.APIServer
	// envtest's APIServer.Stop sends SIGTERM, and with watches open kube-apiserver takes longer than its
	// 20s stop timeout to exit; Stop then kills it and removes the certificate directory, so a restarted
	// apiserver would serve with a new CA. Kill the process (by its pid) instead, keeping its certificates,
	// and Start it again on the same port.
	pid := apiServerPID(t, apiServer)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing kube-apiserver (pid %d): %v", pid, err)
	}
	time.Sleep(2 * time.Second) // the apiserver stays down across a few renewal periods
	if err := apiServer.Start(); err != nil {
		t.Fatalf("starting the apiserver again: %v", err)
	}

	before := getLease(t, ns, "lock").ResourceVersion
	eventually(t, 20*time.Second, "a renewal after the restart", func() bool {
		return getLease(t, ns, "lock").ResourceVersion != before
	})
	if !a.e.IsLeader() || a.e.Token() != first {
		t.Fatalf("after the restart the leader reports %v (leader=%v), want %v", a.e.Token(), a.e.IsLeader(), first)
	}
	h.mu.Lock()
	n := len(h.order)
	h.mu.Unlock()
	if n != 1 {
		t.Fatalf("leadership changed across the restart: %v", h.order)
	}

	a.stop()
	second := h.wait(t, 10*time.Second) // far below the 30s lease: the standby saw the release on its watch
	if second.Holder != "b" || second.Epoch != first.Epoch+1 {
		t.Errorf("after release: %v", second)
	}
	h.check(t)
}

// apiServerPID reads the pid of envtest's kube-apiserver process (an unexported field).
func apiServerPID(t *testing.T, s *envtest.APIServer) int {
	t.Helper()
	v := reflect.ValueOf(s).Elem().FieldByName("processState")
	if !v.IsValid() || v.IsNil() {
		t.Fatal("envtest's APIServer has no processState")
	}
	cmd := v.Elem().FieldByName("Cmd")
	if cmd.IsNil() || cmd.Elem().FieldByName("Process").IsNil() {
		t.Fatal("envtest's kube-apiserver is not running")
	}
	return int(cmd.Elem().FieldByName("Process").Elem().FieldByName("Pid").Int())
}
