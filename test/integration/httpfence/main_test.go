package httpfence_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
	"github.com/fencekit/fencekit/test/util/pgtest"
)

// pg is the package's PostgreSQL server; each test takes a database of its own.
var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }

// keyFromPath fences each path under /orders/ as its own key ("orders/<id>"), as in pkg/fencing/httpfence's
// tests.
func keyFromPath(r *http.Request) (string, error) {
	id, ok := strings.CutPrefix(r.URL.Path, "/orders/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", errors.New("path " + strconv.Quote(r.URL.Path) + " is not /orders/<id>")
	}
	return "orders/" + id, nil
}

// send makes a request to srv with the given Fencing-Token values (none when empty) and returns the
// status and, for a refusal status (400, 409, 500, 503), its decoded body, which must be JSON.
func send(t *testing.T, srv *httptest.Server, path string, tokens ...string) (int, httpfence.Refusal) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+path, strings.NewReader("{}"))
	if err != nil {
		t.Error(err) // not Fatal: send also runs on goroutines of its own
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
	defer resp.Body.Close()
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
