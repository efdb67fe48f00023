package fencing_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// A write that never gets an answer (a connection that died while the process was paused) is abandoned
// after DefaultWriteTimeout when the caller's context has no deadline, instead of hanging for ever.
func TestWriterDoesNotHang(t *testing.T) {
	var abandoned atomic.Int32
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if !strings.Contains(r.URL.Path, "/fencedresources/") {
				return rt.RoundTrip(r) // discovery goes through
			}
			<-r.Context().Done() // no answer until the client gives up
			abandoned.Add(1)
			return nil, r.Context().Err()
		})
	})
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	tok := elector.Token{Epoch: 1, Lease: types.NamespacedName{Namespace: "default", Name: "hung-writer"}, Holder: "w"}
	done := make(chan error, 1)
	go func() {
		_, err := fencing.NewWriter(c).Set(context.Background(), tok, types.NamespacedName{Namespace: "default", Name: "hung"}, map[string]any{"n": 1})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || abandoned.Load() != 1 {
			t.Errorf("Set = %v after %d abandoned requests, want context.DeadlineExceeded after 1", err, abandoned.Load())
		}
	case <-time.After(3 * fencing.DefaultWriteTimeout):
		t.Fatalf("Set still hangs after %s", 3*fencing.DefaultWriteTimeout)
	}
}
