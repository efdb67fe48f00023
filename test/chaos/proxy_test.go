package chaos

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := c.Write(append(sc.Bytes(), '\n')); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestProxy: the partition (F4) and slowness (F5, F10) the suite injects, on a real TCP connection.
func TestProxy(t *testing.T) {
	p, err := NewProxy("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip := func(msg string) (string, error) {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		return r.ReadString('\n')
	}
	if got, err := roundTrip("pass"); err != nil || got != "pass\n" {
		t.Fatalf("pass: %q, %v", got, err)
	}
	p.Set(Delay, 20*time.Millisecond)
	if got, err := roundTrip("delay"); err != nil || got != "delay\n" {
		t.Fatalf("delay: %q, %v", got, err)
	}

	// A blackhole holds the request; after the heal it arrives late, as TCP would retransmit it.
	p.Set(Blackhole, 0)
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if got, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a blackhole: %q, %v; want nothing", got, err)
	}
	p.Set(Pass, 0)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after the heal: %q, %v; want the held request answered", got, err)
	}

	// Drop resets open connections and closes new ones.
	p.Set(Drop, 0)
	if _, err := roundTrip("dropped"); err == nil {
		t.Fatal("a dropped connection answered")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = c2.Write([]byte("new\n"))
		if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
			t.Fatal("a new connection through a dropping proxy answered")
		}
		_ = c2.Close()
	}
}

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
