// Package httpfencetest holds what the tests of pkg/fencing/httpfence share, in the package (against the
// memory store) and in test/integration/httpfence (against PostgreSQL): a key function, a client that
// sends tokens and decodes refusals, a fenced handler that records the epochs it ran for, and the race of
// two overlapping requests.
package httpfencetest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
)

// KeyFromPath fences each path under /orders/ as its own key ("orders/<id>").
func KeyFromPath(r *http.Request) (string, error) {
	id, ok := strings.CutPrefix(r.URL.Path, "/orders/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", errors.New("path " + strconv.Quote(r.URL.Path) + " is not /orders/<id>")
	}
	return "orders/" + id, nil
}

// Send makes a PUT request to srv with the given Fencing-Token values (none when empty) and returns the
// status and, for a refusal status (400, 409, 500, 503), its decoded body, which must be JSON. It reports
// failures with t.Error, not t.Fatal: it also runs on goroutines of its own.
func Send(t *testing.T, srv *httptest.Server, path string, tokens ...string) (int, httpfence.Refusal) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Error(err)
		return 0, httpfence.Refusal{}
	}
	for _, v := range tokens {
		req.Header.Add(httpfence.HeaderToken, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return 0, httpfence.Refusal{}
	}
	defer func() { _ = resp.Body.Close() }()
	var r httpfence.Refusal
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable:
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("refusal %d has Content-Type %q, want application/json", resp.StatusCode, ct)
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Errorf("refusal %d: decoding body: %v", resp.StatusCode, err)
		}
	}
	return resp.StatusCode, r
}

// Recorder is a fenced handler that records the epochs it ran for, in order.
type Recorder struct {
	mu     sync.Mutex
	epochs []int64
}

// ServeHTTP records the epoch of the request's token and answers 200 with it; a request without a token in
// its context (one the middleware did not admit) gets 500.
func (rec *Recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, ok := httpfence.TokenFrom(r.Context())
	if !ok {
		http.Error(w, "no token in context", http.StatusInternalServerError)
		return
	}
	rec.mu.Lock()
	rec.epochs = append(rec.epochs, tok.Epoch)
	rec.mu.Unlock()
	_, _ = io.WriteString(w, "written at "+strconv.FormatInt(tok.Epoch, 10))
}

// Seen is the epochs the handler ran for, in order.
func (rec *Recorder) Seen() []int64 {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.epochs)
}

// Overlap runs the race a check-then-release middleware loses. It serves store's Middleware over a
// handler that calls write for each admitted request (a write error answers 500), sends a request at
// epoch 5 to /orders/1 and holds its handler before write; it then sends one at epoch 6, waits until
// queued reports it waiting behind the first (or it was answered), lets the first go on, and returns the
// two statuses and the server, which is closed when the test ends.
func Overlap(t *testing.T, store httpfence.Store, write func(r *http.Request, epoch int64) error, queued func() bool) ([]int, *httptest.Server) {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := httpfence.TokenFrom(r.Context())
		if tok.Epoch == 5 {
			close(entered)
			<-release
		}
		if err := write(r, tok.Epoch); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	srv := httptest.NewServer(httpfence.Middleware(store, KeyFromPath, h))
	t.Cleanup(srv.Close)
	t.Cleanup(free) // runs before srv.Close, so a failed test does not hang on the held request
	codes := make(chan int, 2)
	go func() { code, _ := Send(t, srv, "/orders/1", "5"); codes <- code }()
	<-entered
	go func() { code, _ := Send(t, srv, "/orders/1", "6"); codes <- code }()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return queued() || len(codes) > 0, nil
	})
	if err != nil {
		t.Fatal("timed out waiting for the epoch-6 request to queue behind the held epoch-5 one")
	}
	free()
	return []int{<-codes, <-codes}, srv
}
