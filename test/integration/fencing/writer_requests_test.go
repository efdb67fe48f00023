package fencing_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// roundTrips counts every request a rest.Config's clients send, by method.
type roundTrips struct {
	mu   sync.Mutex
	sent []string
}

func (n *roundTrips) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			n.mu.Lock()
			n.sent = append(n.sent, r.Method+" "+r.URL.Path)
			n.mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

func (n *roundTrips) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.sent
	n.sent = nil
	return out
}

// TestWriterSetSendsOneRequest: a worker builds its Writer with NewWriterForConfig from a rest.Config alone
// and writes; every round trip its client makes is counted. A Set of a resource sends exactly one request,
// a PATCH, and leaves the data, epoch and writer the token says. A Set with a token of another Lease fails
// with an error naming the object and both Leases, and writes nothing.
func TestWriterSetSendsOneRequest(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	key := env.Declare(t, ns, "orders", "orders-writer")
	var n roundTrips
	w, err := fencing.NewWriterForConfig(n.wrap(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	tok := elector.Token{Epoch: 3, Holder: "worker-a", Lease: types.NamespacedName{Namespace: ns, Name: "orders-writer"}}
	// The first write of a resource created without annotations also writes the annotations map.
	if _, err := w.Set(ctx, tok, key, map[string]any{"batch": 1}); err != nil {
		t.Fatal(err)
	}
	n.take()

	got, err := w.Set(ctx, tok, key, map[string]any{"batch": 2, "by": "worker-a"})
	if err != nil {
		t.Fatal(err)
	}
	path := "/apis/fencing.fencekit.io/v1alpha1/namespaces/" + ns + "/fencedresources/orders"
	if diff := cmp.Diff([]string{"PATCH " + path}, n.take()); diff != "" {
		t.Errorf("the requests of one Set (-want +got):\n%s", diff)
	}
	if string(got.Spec.Data.Raw) != `{"batch":2,"by":"worker-a"}` || got.Spec.Epoch != 3 || got.Annotations[fencingv1alpha1.WriterAnnotation] != "worker-a" {
		t.Errorf("after Set: data %s, epoch %d, writer %q; want the token's", got.Spec.Data.Raw, got.Spec.Epoch, got.Annotations[fencingv1alpha1.WriterAnnotation])
	}

	other := tok
	other.Lease.Name = "billing-writer"
	_, err = w.Set(ctx, other, key, map[string]any{"batch": 666})
	for _, want := range []string{"FencedResource " + ns + "/orders", "bound to lease " + ns + "/orders-writer", "token's lease " + ns + "/billing-writer"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Set with a token of another Lease: %v, want an error saying %q", err, want)
		}
	}
	var stored fencingv1alpha1.FencedResource
	if err := env.Client.Get(ctx, key, &stored); err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(stored.Spec.Data.Raw, &data); err != nil || data["batch"] != float64(2) {
		t.Errorf("after the refused Set the data is %s (%v), want batch 2", stored.Spec.Data.Raw, err)
	}
}
