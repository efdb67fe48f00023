package httpfence_test

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
	"github.com/fencekit/fencekit/test/util/httpfencetest"
)

// stores gives t each Store to test with: in memory, and on PostgreSQL (a fresh database, fences created
// on first use). epoch reads a key's admitted epoch.
func stores(t *testing.T) map[string]func(t *testing.T) (store httpfence.Store, epoch func(key string) int64) {
	return map[string]func(t *testing.T) (httpfence.Store, func(string) int64){
		"memory": func(t *testing.T) (httpfence.Store, func(string) int64) {
			s := httpfence.NewMemoryStore()
			return s, s.Epoch
		},
		"postgres": func(t *testing.T) (httpfence.Store, func(string) int64) {
			db, s := postgresStore(t, sqlfence.Options{Create: true})
			return s, func(key string) int64 {
				e, err := mustFence(t, s, key).Epoch(t.Context(), db)
				if err != nil {
					t.Fatal(err)
				}
				return e
			}
		},
	}
}

// TestMiddlewareConcurrent: racing requests with random epochs on one key, for each store: handlers run
// in non-decreasing epoch order, each refusal names a higher admitted epoch, the handlers that ran are
// exactly the requests answered 200, and the highest epoch is always admitted.
func TestMiddlewareConcurrent(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store, epochOf := newStore(t)
			rec := &httpfencetest.Recorder{}
			srv := httptest.NewServer(httpfence.Middleware(store, httpfencetest.KeyFromPath, rec))
			defer srv.Close()
			const clients = 32
			epochs := make([]int64, clients)
			for i := range epochs {
				epochs[i] = 1 + rand.Int64N(10)
			}
			start := make(chan struct{})
			var wg sync.WaitGroup
			ok := make([]bool, clients)
			for i := range clients {
				wg.Go(func() {
					<-start
					code, r := httpfencetest.Send(t, srv, "/orders/1", strconv.FormatInt(epochs[i], 10))
					switch {
					case code == http.StatusOK:
						ok[i] = true
					case code == http.StatusConflict && r.Epoch == epochs[i] && r.AdmittedEpoch > epochs[i]:
					default:
						t.Errorf("epoch %d: %d %+v", epochs[i], code, r)
					}
				})
			}
			close(start)
			wg.Wait()
			seen := rec.Seen()
			if !slices.IsSorted(seen) {
				t.Errorf("handlers ran out of epoch order: %v", seen)
			}
			var admitted []int64
			for i, o := range ok {
				if o {
					admitted = append(admitted, epochs[i])
				}
			}
			slices.Sort(admitted)
			if diff := cmp.Diff(admitted, seen); diff != "" {
				t.Errorf("handler runs differ from 200 responses (-200s +runs):\n%s", diff)
			}
			if top := slices.Max(epochs); epochOf("orders/1") != top || slices.Max(seen) != top {
				t.Errorf("store at %d, highest run %d, want the highest epoch %d", epochOf("orders/1"), slices.Max(seen), top)
			}
		})
	}
}

// TestPanickingHandlerReleasesKey: a handler that panics does not wedge its key: the next request is
// served, and (with PostgreSQL) the panicking request's raise is rolled back.
func TestPanickingHandlerReleasesKey(t *testing.T) {
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			store, epochOf := newStore(t)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tok, _ := httpfence.TokenFrom(r.Context()); tok.Epoch == 9 {
					panic(http.ErrAbortHandler) // net/http closes the connection without logging
				}
			})
			srv := httptest.NewServer(httpfence.Middleware(store, httpfencetest.KeyFromPath, h))
			defer srv.Close()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/orders/1", nil)
			req.Header.Set(httpfence.HeaderToken, "9")
			if resp, err := srv.Client().Do(req); err == nil {
				resp.Body.Close()
				t.Errorf("a panicking handler's request got status %d", resp.StatusCode)
			}
			// PostgreSQL rolled the raise to 9 back; the memory store keeps raises.
			want := map[string]int{"postgres": http.StatusOK, "memory": http.StatusConflict}[name]
			if code, r := httpfencetest.Send(t, srv, "/orders/1", "8"); code != want {
				t.Errorf("epoch 8 after a panicked epoch-9 request: %d %+v, want %d", code, r, want)
			}
			if code, r := httpfencetest.Send(t, srv, "/orders/1", "10"); code != http.StatusOK {
				t.Errorf("epoch 10: %d %+v: the key is wedged", code, r)
			}
			if got := epochOf("orders/1"); got != 10 {
				t.Errorf("key at epoch %d, want 10", got)
			}
		})
	}
}
