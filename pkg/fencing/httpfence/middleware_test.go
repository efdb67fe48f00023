package httpfence_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
	"github.com/fencekit/fencekit/test/util/httpfencetest"
)

// TestMiddlewareRefusals: each bad request gets the documented status and a JSON body naming the header
// or key and the numbers, and never reaches the handler.
func TestMiddlewareRefusals(t *testing.T) {
	rec := &httpfencetest.Recorder{}
	srv := httptest.NewServer(httpfence.Middleware(httpfence.NewMemoryStore(), httpfencetest.KeyFromPath, rec))
	defer srv.Close()
	if code, _ := httpfencetest.Send(t, srv, "/orders/1", "7"); code != http.StatusOK {
		t.Fatalf("first write at epoch 7: status %d", code)
	}
	for _, tc := range []struct {
		name   string
		path   string
		tokens []string
		code   int
		want   httpfence.Refusal // Message checked for the named parts below
		words  []string
	}{
		{"stale", "/orders/1", []string{"6"}, 409,
			httpfence.Refusal{Reason: "FencingStaleEpoch", Key: "orders/1", Epoch: 6, AdmittedEpoch: 7}, []string{"6", "7", "orders/1"}},
		{"missing header", "/orders/1", nil, 400,
			httpfence.Refusal{Reason: "FencingInvalid", Header: "Fencing-Token"}, []string{"Fencing-Token", "missing"}},
		{"two headers", "/orders/1", []string{"7", "8"}, 400,
			httpfence.Refusal{Reason: "FencingInvalid", Header: "Fencing-Token"}, []string{"Fencing-Token", "2 times"}},
		{"leading zeros", "/orders/1", []string{"007"}, 400,
			httpfence.Refusal{Reason: "FencingInvalid", Header: "Fencing-Token"}, []string{"Fencing-Token", `"007"`}},
		{"negative", "/orders/1", []string{"-1"}, 400,
			httpfence.Refusal{Reason: "FencingInvalid", Header: "Fencing-Token"}, []string{"Fencing-Token", `"-1"`}},
		{"zero", "/orders/1", []string{"0"}, 400,
			httpfence.Refusal{Reason: "FencingInvalid", Header: "Fencing-Token"}, []string{"Fencing-Token", `"0"`}},
		{"exponent", "/orders/1", []string{"1e3"}, 400,
			httpfence.Refusal{Reason: "FencingInvalid", Header: "Fencing-Token"}, []string{"Fencing-Token", `"1e3"`}},
		{"above MaxEpoch", "/orders/1", []string{"9007199254740992"}, 400,
			httpfence.Refusal{Reason: "FencingFutureEpoch", Header: "Fencing-Token"}, []string{"Fencing-Token", "9007199254740992", "9007199254740991"}},
		{"a value to overflow float64 comparisons", "/orders/1", []string{"9007199254740993"}, 400,
			httpfence.Refusal{Reason: "FencingFutureEpoch", Header: "Fencing-Token"}, []string{"9007199254740993"}},
		{"no key", "/elsewhere", []string{"8"}, 400,
			httpfence.Refusal{Reason: "FencingInvalid", Epoch: 8}, []string{"/elsewhere"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, got := httpfencetest.Send(t, srv, tc.path, tc.tokens...)
			if code != tc.code {
				t.Errorf("status %d, want %d", code, tc.code)
			}
			msg := got.Message
			got.Message = ""
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			for _, w := range tc.words {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q does not mention %s", msg, w)
				}
			}
		})
	}
	if diff := cmp.Diff([]int64{7}, rec.Seen()); diff != "" {
		t.Errorf("handler ran for (-want +got):\n%s", diff)
	}
	// Keys are fenced separately, and the holder itself keeps writing at its epoch.
	for _, path := range []string{"/orders/2", "/orders/1"} {
		if code, r := httpfencetest.Send(t, srv, path, "7"); code != http.StatusOK {
			t.Errorf("%s at epoch 7: %d %+v", path, code, r)
		}
	}
}

// TestStaleRequestCannotOvertake: the race a check-then-release middleware loses. A request at epoch 5 is
// admitted and its handler is slow; a request at epoch 6 arrives meanwhile. The epoch-6 handler must not
// run until the epoch-5 one has finished, so the epoch-5 write can never land after the epoch-6 one.
func TestStaleRequestCannotOvertake(t *testing.T) {
	store := httpfence.NewMemoryStore()
	var mu sync.Mutex
	var order []string
	codes, srv := httpfencetest.Overlap(t, store, func(_ *http.Request, epoch int64) error {
		mu.Lock()
		order = append(order, strconv.FormatInt(epoch, 10))
		mu.Unlock()
		return nil
	}, func() bool { return store.Waiting("orders/1") == 1 })
	if diff := cmp.Diff([]int{http.StatusOK, http.StatusOK}, codes); diff != "" {
		t.Errorf("statuses (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"5", "6"}, order); diff != "" {
		t.Errorf("handler order (-want +got):\n%s", diff)
	}
	if code, r := httpfencetest.Send(t, srv, "/orders/1", "5"); code != http.StatusConflict || r.AdmittedEpoch != 6 {
		t.Errorf("epoch 5 after 6: %d %+v, want 409 naming admitted epoch 6", code, r)
	}
}

// TestHandlerResponsePassesThrough: the handler's own status, headers and body reach the client (error
// statuses included), after the fence check.
func TestHandlerResponsePassesThrough(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Order", "1")
		if r.Method == http.MethodDelete {
			http.Error(w, "cannot delete a paid order", http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "created")
	})
	srv := httptest.NewServer(httpfence.Middleware(httpfence.NewMemoryStore(), httpfencetest.KeyFromPath, h))
	defer srv.Close()
	for _, tc := range []struct {
		method string
		code   int
		body   string
	}{{http.MethodPut, 201, "created"}, {http.MethodDelete, 422, "cannot delete a paid order\n"}} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+"/orders/1", nil)
		req.Header.Set(httpfence.HeaderToken, "3")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || string(body) != tc.body || resp.Header.Get("X-Order") != "1" {
			t.Errorf("%s: %d %q X-Order=%q, want %d %q 1", tc.method, resp.StatusCode, body, resp.Header.Get("X-Order"), tc.code, tc.body)
		}
	}
}
