// Package httpfencetest holds what the tests of pkg/fencing/httpfence share, in the package (against the
// memory store) and in test/integration/httpfence (against PostgreSQL): a key function, a client that
// sends tokens and decodes refusals, and a fenced handler that records the epochs it ran for.
package httpfencetest

import (
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
