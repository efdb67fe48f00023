package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := PickFreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// PickFreePort is FreePort for code that has no test to fail, such as a server a TestMain starts.
func PickFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PickServerPort returns a TCP port on 127.0.0.1 that was free a moment ago and lies below the kernel's range
// of ephemeral ports (net.ipv4.ip_local_port_range), for a server that a package's tests stop and start again
// on the same port (the operator's webhook server, whose port the apiserver's webhook configurations name):
// while it is down, no outgoing connection can take that port as its source, as one did with a port picked
// by PickFreePort ("bind: address already in use" for every later test of the package). It falls back on
// PickFreePort where the range leaves no room below it.
func PickServerPort() (int, error) {
	low := 32768 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const from = 20000
	if low-from < 1000 {
		return PickFreePort()
	}
	var last error
	for range 100 {
		port := from + rand.IntN(low-from)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			last = err
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port in [%d, %d) after 100 tries: %w", from, low, last)
}

// RoundTripFunc is an http.RoundTripper made of a function: a test puts one in a rest.Config (WrapTransport)
// to delay, drop or count the requests of the client under test.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
