package httpfence_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/fencing/httpfence"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/httpfencetest"
)

// holder is what the elector's Token method returns over time: the token of the current acquisition.
type holder struct {
	mu  sync.Mutex
	tok elector.Token
}

func (h *holder) Token() elector.Token { h.mu.Lock(); defer h.mu.Unlock(); return h.tok }
func (h *holder) set(t elector.Token)  { h.mu.Lock(); defer h.mu.Unlock(); h.tok = t }

type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

var orderLease = types.NamespacedName{Namespace: "default", Name: "orders-writer"}

// TestTransport: every request carries the token current when it is sent (following re-acquisitions);
// without a token, or with an epoch no elector issues, nothing is sent, the body is closed, and the error
// says why. The caller's request is not modified.
func TestTransport(t *testing.T) {
	var mu sync.Mutex
	var got [][2]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, [2]string{r.Header.Get(httpfence.HeaderToken), r.Header.Get(httpfence.HeaderLease)})
		mu.Unlock()
	}))
	defer srv.Close()
	h := &holder{}
	client := &http.Client{Transport: &httpfence.Transport{Token: h.Token, Base: srv.Client().Transport}}
	put := func() (*closeRecorder, *http.Request, error) {
		body := &closeRecorder{Reader: strings.NewReader("{}")}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/orders/1", body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return body, req, err
	}

	for _, tok := range []elector.Token{{}, {Epoch: protocol.MaxEpoch + 1, Lease: orderLease}, {Epoch: -3, Lease: orderLease}} {
		h.set(tok)
		body, _, err := put()
		if err == nil {
			t.Errorf("token %v: the request was sent", tok)
		}
		if !body.closed.Load() {
			t.Errorf("token %v: request body left open", tok)
		}
	}
	h.set(elector.Token{})
	if _, _, err := put(); !errors.Is(err, fencing.ErrNoToken) {
		t.Errorf("zero token: got %v, want ErrNoToken", err)
	}
	h.set(elector.Token{Epoch: -3})
	if _, _, err := put(); fencing.ReasonOf(err) != protocol.ReasonInvalid || !strings.Contains(err.Error(), "-3") {
		t.Errorf("epoch -3: got %v, want an invalid-epoch error naming -3", err)
	}
	h.set(elector.Token{Epoch: protocol.MaxEpoch + 1})
	if _, _, err := put(); fencing.ReasonOf(err) != protocol.ReasonFutureEpoch {
		t.Errorf("epoch above MaxEpoch: got %v, want a never-issued error", err)
	}
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("the server received %d requests without a valid token", len(got))
	}
	mu.Unlock()

	h.set(elector.Token{Epoch: 7, Lease: orderLease, Holder: "worker-a"})
	_, req, err := put()
	if err != nil {
		t.Fatal(err)
	}
	if req.Header.Get(httpfence.HeaderToken) != "" {
		t.Error("the transport modified the caller's request")
	}
	h.set(elector.Token{Epoch: 8, Lease: orderLease, Holder: "worker-a"}) // re-acquired
	if _, _, err := put(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := [][2]string{{"7", "default/orders-writer"}, {"8", "default/orders-writer"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("server saw %v, want %v", got, want)
	}
}

// TestTransportToMiddleware: a client and a service end to end. The new holder's write goes through; the
// paused former holder's write gets 409, which ResponseError turns into an error fencing.IsStale
// recognises on the client, with both epochs.
func TestTransportToMiddleware(t *testing.T) {
	rec := &httpfencetest.Recorder{}
	srv := httptest.NewServer(httpfence.Middleware(httpfence.NewMemoryStore(), httpfencetest.KeyFromPath, rec))
	defer srv.Close()
	do := func(epoch int64) error {
		client := &http.Client{Transport: &httpfence.Transport{
			Token: func() elector.Token { return elector.Token{Epoch: epoch, Lease: orderLease} },
			Base:  srv.Client().Transport,
		}}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/orders/1", strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return httpfence.ResponseError(resp)
	}
	if err := do(8); err != nil {
		t.Fatalf("new holder at epoch 8: %v", err)
	}
	err := do(7)
	var fe *fencing.Error
	if !fencing.IsStale(err) || !errors.As(err, &fe) || fe.Epoch != 7 || fe.LeaseEpoch != 8 || fe.Resource != "orders/1" {
		t.Fatalf("paused holder at epoch 7: got %#v, want a stale error for orders/1 naming 7 and 8", err)
	}
	if seen := rec.Seen(); len(seen) != 1 || seen[0] != 8 {
		t.Errorf("handler ran for %v, want only epoch 8", seen)
	}
}
