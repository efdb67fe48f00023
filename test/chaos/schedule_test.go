package chaos

import (
	"testing"
	"time"
)

// TestScheduleIsSeeded: the same seed replays the same schedule; another seed gives another.
func TestScheduleIsSeeded(t *testing.T) {
	a := Schedule(42, AllFaults, time.Minute, 3*time.Second, 3)
	b := Schedule(42, AllFaults, time.Minute, 3*time.Second, 3)
	c := Schedule(43, AllFaults, time.Minute, 3*time.Second, 3)
	if len(a) < 3 {
		t.Fatalf("a one-minute schedule has %d events", len(a))
	}
	if !equalEvents(a, b) {
		t.Errorf("seed 42 gave two schedules:\n%v\n%v", a, b)
	}
	if equalEvents(a, c) {
		t.Errorf("seeds 42 and 43 gave the same schedule %v", a)
	}
	for _, e := range Schedule(7, []Fault{F3Zombie}, time.Minute, 3*time.Second, 3) {
		if e.Length <= 3*time.Second {
			t.Errorf("zombie pause %s is not longer than the 3s lease", e.Length)
		}
	}
	// Every skew F8 draws leaves a window in which the standbys have taken over and the holder still
	// believes it leads: otherwise F8 would only test the elector, not the fence.
	for seed := range int64(20) {
		for _, e := range Schedule(seed, []Fault{F8ClockSkew}, time.Minute, 3*time.Second, 3) {
			if lo, hi := skewWindow(ShortTimings(), e.Slow, e.Fast); lo >= hi {
				t.Errorf("seed %d: F8 at %.2fx/%.2fx: the standbys take over after %s, but the holder steps down before %s", seed, e.Slow, e.Fast, lo, hi)
			}
		}
		for _, e := range Schedule(seed, []Fault{F11CertRotation}, time.Minute, 3*time.Second, 3) {
			if e.Rotation != RotateBundleFirst && e.Rotation != RotateFilesFirst && e.Rotation != RotateOverlap {
				t.Errorf("seed %d: F11 drew the unknown rotation order %q", seed, e.Rotation)
			}
		}
	}
}

func equalEvents(a, b []Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
