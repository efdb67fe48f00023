package elector

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fencekit/fencekit/pkg/protocol"
)

// The package's own tests are pure: they call its functions with values and a fake clock, and need no
// apiserver. The elector's loop on a real apiserver is tested in test/integration/elector.

// t0 is where the fake clocks of the package's tests start.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// lease is the fenced Lease ns/lock at resourceVersion 500, held by holder ("-": no holder at all), with
// leaseDurationSeconds seconds (nil: none) and annotations.
func lease(holder string, seconds *int32, annotations map[string]string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lock", Namespace: "ns", ResourceVersion: "500", Annotations: annotations,
		Labels: map[string]string{protocol.FencedLabel: "true"}}}
	if holder != "-" {
		l.Spec.HolderIdentity = &holder
	}
	l.Spec.LeaseDurationSeconds = seconds
	// renewTime is far in the past by the wall clock: it must play no part.
	old := metav1.NewMicroTime(t0.Add(-24 * time.Hour))
	l.Spec.RenewTime = &old
	return l
}

func i32(v int32) *int32 { return &v }

// waitFor polls a condition that depends only on goroutine scheduling (never on time passing). This
// in-package test cannot use test/util/testenv's poller (testenv imports pkg/elector), so it calls the
// same wait.PollUntilContextTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}
