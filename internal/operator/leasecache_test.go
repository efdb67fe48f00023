package operator_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/internal/operator/webhook"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// stall holds every response of a client while it is stalled: a request waits before it is sent, and a
// response body (a watch stream) delivers nothing more. It gives the webhooks' copy of the Leases a lag
// as long as the test wants, the copy's worst case.
type stall struct {
	mu      sync.Mutex
	stalled bool
	resumed chan struct{}
}

func newStall() *stall { return &stall{resumed: make(chan struct{})} }

func (s *stall) wait() {
	s.mu.Lock()
	stalled, resumed := s.stalled, s.resumed
	s.mu.Unlock()
	if stalled {
		<-resumed
	}
}

func (s *stall) set(stalled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stalled && !stalled {
		close(s.resumed)
		s.resumed = make(chan struct{})
	}
	s.stalled = stalled
}

func (s *stall) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		s.wait()
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body = stalledBody{ReadCloser: resp.Body, s: s}
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type stalledBody struct {
	io.ReadCloser
	s *stall
}

func (b stalledBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.s.wait() // what arrived while stalled is handed over only once resumed
	return n, err
}

// leaseReads reads fencekit_webhook_lease_reads_total{webhook,source} from controller-runtime's registry.
func leaseReads(t *testing.T, webhook, source string) float64 {
	return testenv.CounterSum(t, "fencekit_webhook_lease_reads_total", map[string]string{"webhook": webhook, "source": source})
}

// TestLeaseCacheLagsAnAcquisition: the webhooks admit a write at the current epoch from their watch-fed
// copy of a Lease that declares fence-on-acquire, without a quorum read. Here that copy is stalled (it
// sees nothing after the first holder's acquisition: the worst lag) while a second holder takes over:
//
//   - the stale holder's write at its old epoch, to a resource the new holder has not fenced yet, is
//     admitted on the copy: it is ordered before the new holder's fence of that resource, hence before
//     the new holder has a token (the guarantee the quorum read gives too);
//   - once the new holder's fence-on-acquire has raised the resource, the stale holder's write is refused,
//     although the copy still shows its epoch;
//   - on a Lease that does not declare fence-on-acquire the copy decides nothing: the stale write is
//     refused at once, from the quorum read, as before the copy existed.
//
// For FencedResources (fencing.FenceOnAcquire) and for ConfigMaps under a FencingPolicy
// (fencing.FenceObjectsOnAcquire) alike.
func TestLeaseCacheLagsAnAcquisition(t *testing.T) {
	s := newStall()
	defer s.set(false)
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(s.wrap)
	leases := webhook.NewLeaseCache(kubernetes.NewForConfigOrDie(cfg))
	operatortest.Start(t, env, func(o *operator.Options) { o.LeaseCache = leases })
	ctx := t.Context()

	type kind struct {
		name    string
		webhook string
		fences  elector.Fences
		// setup declares the fenced object (bound to lease) and returns a write presenting tok's epoch and
		// the fence-on-acquire hook of that kind.
		setup func(t *testing.T, ns, lease string, w worker) (write func(tok elector.Token, v string) error, fence func(elector.Token) error)
	}
	kinds := []kind{
		{name: "FencedResource", webhook: "fencedresources", fences: elector.Fences{FencedResources: true},
			setup: func(t *testing.T, ns, lease string, w worker) (func(elector.Token, string) error, func(elector.Token) error) {
				key := declare(t, ns, "r", lease)
				writer := fencing.NewWriter(w.Client)
				return func(tok elector.Token, v string) error {
						_, err := writer.Set(ctx, tok, key, map[string]any{"v": v})
						return err
					}, func(tok elector.Token) error {
						return fencing.FenceOnAcquire(w.Client).Raise(ctx, tok)
					}
			}},
		{name: "ConfigMap under a FencingPolicy", webhook: "objects", fences: elector.Fences{Objects: true},
			setup: func(t *testing.T, ns, lease string, w worker) (func(elector.Token, string) error, func(elector.Token) error) {
				grantObjects(t, ns, w.User)
				grantPolicies(t, ns, w.User)
				p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
					Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps"}}}}
				if err := env.Client.Create(ctx, p); err != nil {
					t.Fatal(err)
				}
				testenv.Eventually(t, "the webhook refuses an unfenced write of a declared ConfigMap", func() (bool, string) {
					err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}}, client.DryRunAll)
					return fencing.IsTokenMissing(err), errString(err)
				})
				created := false
				return func(tok elector.Token, v string) error {
						c := fencing.NewClient(w.Client, tokenOf(tok))
						if !created {
							created = true
							return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": v}})
						}
						cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}}
						return c.Patch(ctx, cm, client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"`+v+`"}}`)))
					}, func(tok elector.Token) error {
						return fencing.FenceObjectsOnAcquire(w.Client, w.Client).Raise(ctx, tok)
					}
			}},
	}
	for _, k := range kinds {
		for _, declared := range []bool{true, false} {
			name := k.name + ", Lease declares fence-on-acquire"
			if !declared {
				name = k.name + ", Lease declares nothing"
			}
			t.Run(name, func(t *testing.T) {
				s.set(false)
				ns := env.Namespace(t)
				r1, r2 := replicas(t, ns)
				if declared {
					r1.Fences, r2.Fences = k.fences, k.fences
				}
				write, fence := k.setup(t, ns, "l", r1)
				t1 := r1.Acquire(t, ns, "l", 1)
				if err := write(t1, "one"); err != nil {
					t.Fatalf("replica-1's first write at epoch 1: %v", err)
				}
				testenv.Eventually(t, "the copy shows the Lease at epoch 1", func() (bool, string) {
					l := leases.Lease(ns, "l")
					return l != nil && l.Annotations[elector.EpochAnnotation] == "1", fmt.Sprint(l)
				})
				if declared {
					testenv.Eventually(t, "replica-1's write at epoch 1 admitted on the copy of the Lease", func() (bool, string) {
						before := leaseReads(t, k.webhook, "cache")
						err := write(t1, "one")
						return err == nil && leaseReads(t, k.webhook, "cache") > before, errString(err)
					})
				}

				s.set(true) // the copy sees nothing from here on
				t2 := r2.Acquire(t, ns, "l", 2)
				cached, quorum := leaseReads(t, k.webhook, "cache"), leaseReads(t, k.webhook, "apiserver")
				err := write(t1, "late-before-fence")
				if declared {
					// Admitted on the stale copy: the new holder has not fenced the object, so has no token yet.
					if err != nil {
						t.Fatalf("replica-1's write before replica-2's fence-on-acquire: %v, want admitted on the copy", err)
					}
					// More than one when the apiserver ran admission twice (its first attempt lost the
					// compare-and-swap to the operator's status write).
					if got := leaseReads(t, k.webhook, "cache"); got <= cached {
						t.Errorf("lease reads from the cache went %v -> %v, want more", cached, got)
					}
				} else {
					mustContain(t, "replica-1's write after the takeover, Lease declaring nothing", err, fencing.IsStale, "stale epoch 1")
					if got := leaseReads(t, k.webhook, "apiserver"); got <= quorum {
						t.Errorf("quorum reads of the Lease went %v -> %v, want more", quorum, got)
					}
				}
				if err := fence(t2); err != nil {
					t.Fatalf("replica-2's fence-on-acquire at epoch 2: %v", err)
				}
				// The copy still shows epoch 1 and replica-1 as holder: the object's epoch refuses the write.
				mustContain(t, "replica-1's write after replica-2's fence-on-acquire, the copy stalled", write(t1, "late-after-fence"),
					fencing.IsStale, "stale epoch 1")
				if err := write(t2, "two"); err != nil {
					t.Errorf("replica-2's write at epoch 2: %v", err)
				}
				mustContain(t, "replica-1's write after replica-2's", write(t1, "late-after-write"), fencing.IsStale, "stale epoch 1")
				s.set(false)
			})
		}
	}
}
