package netproxy

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
