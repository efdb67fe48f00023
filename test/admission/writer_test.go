package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The tests of pkg/fencing's writer and fence hook against the running operator (its webhook admits the
// writes): they live on the operator's side of the import rules (docs/design/imports.md), not in pkg/fencing.

// process is one process's worth of fencekit: its own user, an elector with fence-on-acquire, a fenced writer.
type process struct {
	id      string
	client  client.Client
	writer  *fencing.Writer
	elector *elector.Elector
	tokens  chan elector.Token
	cancel  context.CancelFunc
	done    chan struct{}
}

// startProcess starts an elector as identity id (user id+"-user") on lease ns/lease. The leadership context
// is passed to lead, if set, which runs as OnStartedLeading. The elector does not release on cancel: a
// cancelled process behaves as a paused or crashed one, whose lease must expire.
func startProcess(t *testing.T, ns, lease, id string, lead func(ctx context.Context, w *process, tok elector.Token)) *process {
	t.Helper()
	c, cfg := env.ElectorClient(t, ns, id+"-user")
	cs, err := kubernetes.NewForConfig(testenv.LimitedConfig(cfg)) // an elector at client-go's default limits
	if err != nil {
		t.Fatal(err)
	}
	w := &process{id: id, client: c, writer: fencing.NewWriter(c), tokens: make(chan elector.Token, 16), done: make(chan struct{})}
	e, err := elector.New(elector.Config{
		Client: cs, Namespace: ns, Name: lease, Identity: id,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond,
		SafetyMargin: 200 * time.Millisecond, ReleaseOnCancel: ptr.To(false),
		PostAcquire: fencing.FenceOnAcquire(c),
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			w.tokens <- tok
			if lead != nil {
				lead(ctx, w, tok)
			}
		},
	}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	w.elector = e
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		defer close(w.done)
		_ = e.Run(ctx)
	}()
	t.Cleanup(w.stop)
	return w
}

// stop stops the process's elector without releasing the lease, as a pause or crash would.
func (w *process) stop() {
	w.cancel()
	<-w.done
}

func (w *process) token(t *testing.T) elector.Token {
	t.Helper()
	select {
	case tok := <-w.tokens:
		return tok
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never became leader", w.id)
		return elector.Token{}
	}
}

func stored(t *testing.T, key types.NamespacedName) (map[string]any, *fencingv1alpha1.FencedResource) {
	t.Helper()
	var fr fencingv1alpha1.FencedResource
	if err := env.Client.Get(t.Context(), key, &fr); err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if fr.Spec.Data != nil {
		if err := json.Unmarshal(fr.Spec.Data.Raw, &m); err != nil {
			t.Fatal(err)
		}
	}
	return m, &fr
}

// TestPausedHolder is the story fencekit exists for, in one process: W1 holds epoch N and stops renewing
// (paused); its lease expires; W2 acquires epoch N+1 and writes; W1 resumes and writes with its old token.
func TestPausedHolder(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	key := declare(t, ns, "orders", "orders-writer")

	w1 := startProcess(t, ns, "orders-writer", "w1", nil)
	t1 := w1.token(t)
	if _, err := w1.writer.Set(t.Context(), t1, key, map[string]any{"by": "w1", "n": 1}); err != nil {
		t.Fatalf("W1's write at epoch %d: %v", t1.Epoch, err)
	}
	w1.stop() // paused: no more renewals, and no release

	w2 := startProcess(t, ns, "orders-writer", "w2", nil)
	t2 := w2.token(t)
	if t2.Epoch != t1.Epoch+1 {
		t.Fatalf("W2 acquired epoch %d, want %d", t2.Epoch, t1.Epoch+1)
	}
	if _, err := w2.writer.Set(t.Context(), t2, key, map[string]any{"by": "w2", "n": 2}); err != nil {
		t.Fatalf("W2's write at epoch %d: %v", t2.Epoch, err)
	}

	_, err := w1.writer.Set(t.Context(), t1, key, map[string]any{"by": "w1", "n": 3})
	if !fencing.IsStale(err) {
		t.Fatalf("W1's late write at epoch %d: got %v, want a stale-epoch refusal", t1.Epoch, err)
	}
	if got, fr := stored(t, key); got["by"] != "w2" || fr.Spec.Epoch != t2.Epoch {
		t.Fatalf("stored %v at epoch %d, want W2's write at epoch %d", got, fr.Spec.Epoch, t2.Epoch)
	}
}

// TestFenceOnAcquire: W2 acquires but never writes; W1's delayed write is refused all the same, because
// the elector fenced the resource at W2's epoch before reporting W2's leadership.
func TestFenceOnAcquire(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	keys := []types.NamespacedName{declare(t, ns, "orders", "orders-writer"), declare(t, ns, "invoices", "orders-writer")}
	other := declare(t, ns, "unrelated", "other-writer")

	w1 := startProcess(t, ns, "orders-writer", "w1", nil)
	t1 := w1.token(t)
	if _, err := w1.writer.Set(t.Context(), t1, keys[0], map[string]any{"by": "w1"}); err != nil {
		t.Fatal(err)
	}
	w1.stop()
	w2 := startProcess(t, ns, "orders-writer", "w2", nil)
	t2 := w2.token(t)

	// Already fenced when W2's leadership was reported: both bound resources are at W2's epoch.
	for _, key := range keys {
		if _, fr := stored(t, key); fr.Spec.FencedEpoch() != t2.Epoch || fr.Annotations[fencingv1alpha1.WriterAnnotation] != "w2" {
			t.Errorf("%s: epoch %d by %q when W2's leadership was reported, want %d by w2", key, fr.Spec.FencedEpoch(), fr.Annotations[fencingv1alpha1.WriterAnnotation], t2.Epoch)
		}
	}
	if _, fr := stored(t, other); fr.Spec.FencedEpoch() != 0 {
		t.Errorf("a resource bound to another lease was fenced to epoch %d", fr.Spec.FencedEpoch())
	}
	for _, key := range keys {
		_, err := w1.writer.Set(t.Context(), t1, key, map[string]any{"by": "w1-late"})
		if !fencing.IsStale(err) {
			t.Errorf("W1's late write to %s: got %v, want a stale-epoch refusal", key, err)
		}
	}
	if got, _ := stored(t, keys[0]); got["by"] != "w1" {
		t.Errorf("stored data %v, want W1's only admitted write", got)
	}
}

// TestRacingWriters runs several holders in turn, each writing as fast as it can and going on writing for
// a while after it lost the lease (a zombie). Watching the resource, the admitted writes never go down in
// epoch, and each was made by the holder of its epoch.
func TestRacingWriters(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	key := declare(t, ns, "counter", "counter-writer")
	ctx := t.Context()

	var fr fencingv1alpha1.FencedResourceList
	if err := env.Client.List(ctx, &fr, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	frWatch, err := wc.Watch(ctx, &fencingv1alpha1.FencedResourceList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: fr.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer frWatch.Stop()

	var mu sync.Mutex
	holders := map[int64]string{} // epoch -> holder, as the electors reported them
	refused := 0
	var zombies sync.WaitGroup
	write := func(w *process, tok elector.Token, n int) {
		_, err := w.writer.Set(context.Background(), tok, key, map[string]any{"by": w.id, "n": n})
		if fencing.IsFenced(err) {
			mu.Lock()
			refused++
			mu.Unlock()
		}
	}
	lead := func(lctx context.Context, w *process, tok elector.Token) {
		mu.Lock()
		holders[tok.Epoch] = tok.Holder
		mu.Unlock()
		n := 0
		for ; lctx.Err() == nil; n++ {
			write(w, tok, n)
		}
		// The leadership ended, but this holder does not know it (a pause): it goes on writing with the
		// same token until well after the next holder has taken over.
		zombies.Add(1)
		go func() {
			defer zombies.Done()
			for until := time.Now().Add(4 * time.Second); time.Now().Before(until); n++ {
				write(w, tok, n)
			}
		}()
	}
	const terms = 4
	for i := range terms {
		w := startProcess(t, ns, "counter-writer", fmt.Sprintf("racer-%d", i), lead)
		w.token(t)
		time.Sleep(700 * time.Millisecond) // let it write for a while, then pause it
		w.stop()
	}
	final := startProcess(t, ns, "counter-writer", "racer-final", lead)
	final.token(t)
	zombies.Wait()
	final.stop()

	var last int64
	admitted := map[int64]int{}
	for done := false; !done; {
		select {
		case ev := <-frWatch.ResultChan():
			if ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			obj := ev.Object.(*fencingv1alpha1.FencedResource)
			e, writer := obj.Spec.Epoch, obj.Annotations[fencingv1alpha1.WriterAnnotation]
			if e < last {
				t.Fatalf("admitted write at epoch %d after one at epoch %d", e, last)
			}
			last = e
			if e == 0 {
				continue
			}
			mu.Lock()
			h := holders[e]
			mu.Unlock()
			if writer != h {
				t.Fatalf("write at epoch %d by %q, but epoch %d was held by %q", e, writer, e, h)
			}
			admitted[e]++
		case <-time.After(2 * time.Second):
			done = true
		}
	}
	if len(admitted) < terms {
		t.Errorf("admitted writes at %d epochs, want at least %d: %v", len(admitted), terms, admitted)
	}
	if refused == 0 {
		t.Errorf("no write was refused: the zombies never raced the new holders, the test proved nothing")
	}
	t.Logf("admitted writes by epoch %v; %d zombie writes refused", admitted, refused)
}
