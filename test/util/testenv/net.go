package testenv

import (
	"net"
	"net/http"
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

// RoundTripFunc is an http.RoundTripper made of a function: a test puts one in a rest.Config (WrapTransport)
// to delay, drop or count the requests of the client under test.
type RoundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip calls f.
func (f RoundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
