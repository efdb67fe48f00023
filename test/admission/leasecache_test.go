package admission_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/internal/operator/webhook"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
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
	a := startCopyAttack(t)
	s, leases := a.s, a.leases
	ctx := t.Context()

	type kind struct {
		name    string
		webhook string
		fences  protocol.Fences
		// setup declares the fenced object (bound to lease) and returns a write presenting tok's epoch and
		// the fence-on-acquire hook of that kind.
		setup func(t *testing.T, ns, lease string, w worker) (write func(tok elector.Token, v string) error, fence func(elector.Token) error)
	}
	kinds := []kind{
		{name: "FencedResource", webhook: "fencedresources", fences: protocol.Fences{FencedResources: true},
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
		{name: "ConfigMap under a FencingPolicy", webhook: "objects", fences: protocol.Fences{Objects: true},
			setup: func(t *testing.T, ns, lease string, w worker) (func(elector.Token, string) error, func(elector.Token) error) {
				configMapPolicy(t, ns, lease, nil, w.User)
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
					return l != nil && l.Annotations[protocol.EpochAnnotation] == "1", fmt.Sprint(l)
				})
				if declared {
					testenv.Eventually(t, "replica-1's write at epoch 1 admitted on the copy of the Lease", func() (bool, string) {
						before := leaseReads(t, k.webhook, "cache")
						err := write(t1, "one")
						return err == nil && leaseReads(t, k.webhook, "cache") > before, testenv.ErrString(err)
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

// Attacks on the webhooks' watch-fed copy of the fenced Leases (webhook.LeaseCache) and on the
// fence-on-acquire declaration it trusts. Each one stalls the copy (the worst lag, as
// TestLeaseCacheLagsAnAcquisition does) and then tries to get a write at a stale epoch admitted that the
// quorum read of the Lease refuses. TestLeaseCacheAttacks says in each subtest whether it is a hole the
// webhook now closes, a check that holds, or a residual the copy cannot see; a residual's subtest asserts
// what happens today and fails, naming itself, once the write is refused.

// copyAttack is one operator whose webhooks decide on a copy of the Leases that the test can stall.
type copyAttack struct {
	s      *stall
	leases *webhook.LeaseCache
	// stop resumes the copy and stops the operator before the test ends.
	stop func()
}

// startCopyAttack runs the operator (operatortest.Start, with change) with its webhooks deciding on a
// copy of the Leases whose client s stalls.
func startCopyAttack(t *testing.T, change ...func(*operator.Options)) copyAttack {
	t.Helper()
	s := newStall()
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(s.wrap)
	leases := webhook.NewLeaseCache(kubernetes.NewForConfigOrDie(cfg))
	stop := operatortest.Start(t, env, append([]func(*operator.Options){func(o *operator.Options) { o.LeaseCache = leases }}, change...)...)
	t.Cleanup(func() { s.set(false) }) // before the operator stops: nothing it waits for stays stalled
	return copyAttack{s: s, leases: leases, stop: func() { s.set(false); stop() }}
}

// seen waits until the copy shows Lease ns/name at epoch and, if holder is not empty, held by holder.
func (a copyAttack) seen(t *testing.T, ns, name string, epoch int64, holder string) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("the copy shows lease %s at epoch %d", name, epoch), func() (bool, string) {
		l := a.leases.Lease(ns, name)
		if l == nil {
			return false, "no copy"
		}
		h := ""
		if l.Spec.HolderIdentity != nil {
			h = *l.Spec.HolderIdentity
		}
		return l.Annotations[protocol.EpochAnnotation] == fmt.Sprint(epoch) && (holder == "" || h == holder),
			fmt.Sprintf("epoch %s, holder %q", l.Annotations[protocol.EpochAnnotation], h)
	})
}

// onCopy waits until write is admitted by the objects or fencedresources webhook on the copy (the fast path
// is in use for it), then returns.
func onCopy(t *testing.T, hook, what string, write func() error) {
	t.Helper()
	testenv.Eventually(t, what+" admitted on the copy of the Lease", func() (bool, string) {
		before := leaseReads(t, hook, "cache")
		err := write()
		return err == nil && leaseReads(t, hook, "cache") > before, testenv.ErrString(err)
	})
}

// createConfigMapPolicy creates, as an admin, FencingPolicy ns/name fencing for lease the ConfigMaps of ns
// that matchLabels select (nil: all), and returns it as created.
func createConfigMapPolicy(t *testing.T, ns, name, lease string, matchLabels map[string]string) *fencingv1alpha1.FencingPolicy {
	t.Helper()
	entry := fencingv1alpha1.FencedObjects{Resource: "configmaps"}
	if matchLabels != nil {
		entry.Selector = &metav1.LabelSelector{MatchLabels: matchLabels}
	}
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: []fencingv1alpha1.FencedObjects{entry}}}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("creating FencingPolicy %s/%s: %v", ns, name, err)
	}
	return p
}

// configMapPolicy declares the ConfigMaps of ns that matchLabels select (nil: all) fenced by lease
// (FencingPolicy app), lets users write ConfigMaps and list policies, and waits until the policy is
// enforced (see enforced).
func configMapPolicy(t *testing.T, ns, lease string, matchLabels map[string]string, users ...string) *fencingv1alpha1.FencingPolicy {
	t.Helper()
	grantObjects(t, ns, users...)
	grantPolicies(t, ns, users...)
	p := createConfigMapPolicy(t, ns, "app", lease, matchLabels)
	enforced(t, ns, p.Name, matchLabels)
	return p
}

// staleHolder starts a step of the attack in a fresh namespace (see namespace) with FencingPolicy app
// fencing the ConfigMaps that matchLabels select (nil: all) for Lease l, declared before the Lease (coverage
// epoch 0). Replica-1 acquires l at epoch 1 and fences, creates ConfigMap name (labelled labels) through
// its fenced client, and the copy shows it holding l at 1. It returns the namespace, the two replicas
// (objectReplicas) and replica-1's fenced client.
func (a copyAttack) staleHolder(t *testing.T, matchLabels map[string]string, name string, labels map[string]string) (ns string, r1, r2 worker, c1 client.Client) {
	t.Helper()
	ns = a.namespace(t)
	r1, r2 = objectReplicas(t, ns)
	configMapPolicy(t, ns, "l", matchLabels, r1.User)
	coverageOf(t, ns, "app", 0)
	c1 = fencing.NewClient(r1.Client, tokenOf(acquireAndFence(t, r1, ns, "l", 1)))
	createConfigMap(t, c1, ns, name, labels)
	a.seen(t, ns, "l", 1, r1.Holder)
	return ns, r1, r2, c1
}

// namespace starts a step of the attack: the copy in step again, and a fresh namespace.
func (a copyAttack) namespace(t *testing.T) string {
	t.Helper()
	a.s.set(false)
	return env.Namespace(t)
}

// acquireAndFence makes r acquire Lease ns/lease at epoch and raise the objects its FencingPolicies cover,
// and returns its token.
func acquireAndFence(t *testing.T, r worker, ns, lease string, epoch int64) elector.Token {
	t.Helper()
	tok := r.Acquire(t, ns, lease, epoch)
	fenceObjects(t, r, tok)
	return tok
}

// setPolicySelector sets the selector of p's first entry (nil: every object of its resource in the
// namespace), retrying conflicts; p is read again first, and holds the policy as updated.
func setPolicySelector(t *testing.T, p *fencingv1alpha1.FencingPolicy, selector *metav1.LabelSelector) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		p.Spec.Resources[0].Selector = selector
		return env.Client.Update(t.Context(), p)
	}); err != nil {
		t.Fatal(err)
	}
}

// holderClient makes r acquire Lease ns/lease at epoch and returns its token and a fenced client
// (fencing.NewClient) that writes with it.
func holderClient(t *testing.T, r worker, ns, lease string, epoch int64) (elector.Token, client.Client) {
	t.Helper()
	tok := r.Acquire(t, ns, lease, epoch)
	return tok, fencing.NewClient(r.Client, tokenOf(tok))
}

// objectReplicas are two replicas of one user (replicas) whose elections fence the objects of FencingPolicies.
func objectReplicas(t *testing.T, ns string) (worker, worker) {
	t.Helper()
	r1, r2 := replicas(t, ns)
	r1.Fences, r2.Fences = protocol.Fences{Objects: true}, protocol.Fences{Objects: true}
	return r1, r2
}

// fenceObjects raises the objects r's FencingPolicies cover to tok's epoch, as r's fence-on-acquire does.
func fenceObjects(t *testing.T, r worker, tok elector.Token) {
	t.Helper()
	if err := fencing.FenceObjectsOnAcquire(r.Client, r.Client).Raise(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
}

// createConfigMap creates the ConfigMap ns/name with labels through c (a fenced client: it records the epoch).
func createConfigMap(t *testing.T, c client.Client, ns, name string, labels map[string]string) {
	t.Helper()
	if err := c.Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}); err != nil {
		t.Fatal(err)
	}
}

func patchConfigMap(t *testing.T, c client.Client, ns, name, patch string) error {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return c.Patch(t.Context(), cm, client.RawPatch(types.MergePatchType, []byte(patch)))
}

func objectEpoch(t *testing.T, ns, name string) string {
	t.Helper()
	return readConfigMap(t, ns, name).Annotations[fencingv1alpha1.ObjectEpochAnnotation]
}

// holdUpdates installs a validating webhook, served by the test, that holds every UPDATE (not dry run) of
// ConfigMap ns/name after the apiserver sent it: admission runs the webhooks in parallel and the write is
// committed only once all have answered, so fencekit's decision is made while the commit waits. arrived
// receives once per held request; release lets them all through.
func holdUpdates(t *testing.T, ns, name string) (arrived <-chan struct{}, release func()) {
	t.Helper()
	w := env.Environment.WebhookInstallOptions
	cert, err := tls.LoadX509KeyPair(filepath.Join(w.LocalServingCertDir, "tls.crt"), filepath.Join(w.LocalServingCertDir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	in, out := make(chan struct{}, 8), make(chan struct{})
	var probed atomic.Bool
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, fmt.Sprint(err), http.StatusBadRequest)
			return
		}
		req := review.Request
		if req.Namespace == ns && req.Name == name {
			if req.DryRun != nil && *req.DryRun {
				probed.Store(true)
			} else {
				in <- struct{}{}
				select {
				case <-out:
				case <-r.Context().Done():
				}
			}
		}
		review.Response = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(rw).Encode(&review)
	}))
	ln, err := net.Listen("tcp", net.JoinHostPort(w.LocalServingHost, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	var once sync.Once
	release = func() { once.Do(func() { close(out) }) }
	t.Cleanup(func() { release(); srv.Close() })

	url := srv.URL + "/hold"
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "hold-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "hold.fencekit-test.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: w.LocalServingCAData},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(30)),
		}}}
	if err := env.Client.Create(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cfg) })
	probes := 0
	testenv.Eventually(t, "the holding webhook is called", func() (bool, string) {
		probes++
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		err := env.Client.Patch(t.Context(), cm, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"probe":"%d"}}}`, probes)), client.DryRunAll)
		return probed.Load(), testenv.ErrString(err)
	})
	return in, release
}

// admittedOnCopy asserts a residual as it stands: write, made while the copy is stalled, is admitted on the
// copy (webhook's decisions on the copy move). It fails, saying that the residual is closed, once the
// write is refused.
func admittedOnCopy(t *testing.T, webhook, what string, write func() error) {
	t.Helper()
	before := leaseReads(t, webhook, "cache")
	if err := write(); err != nil {
		t.Fatalf("%s, the copy stalled: %v; the residual is closed, update this test", what, err)
	}
	if leaseReads(t, webhook, "cache") <= before {
		t.Errorf("%s was not admitted on the copy", what)
	}
}

// webhookAnswers is how many admission requests fencekit's webhook at path has answered.
func webhookAnswers(t *testing.T, path string) float64 {
	return testenv.CounterSum(t, "controller_runtime_webhook_requests_total", map[string]string{"webhook": path})
}

func TestLeaseCacheAttacks(t *testing.T) {
	a := startCopyAttack(t)
	ctx := t.Context()
	objects := protocol.Fences{Objects: true}
	fenced := map[string]string{"app": "fenced"}

	// HOLE (closed): a ConfigMap outside the policy's selector is not fenced, so the stale holder may write
	// it freely, and NewClient stamps its epoch record. Fence-on-acquire lists only the ConfigMaps the
	// selector matches, so it does not raise it. The stale holder then labels it into the selector at its old
	// epoch: the record (1) is the epoch it presents and the copy shows the Lease at 1, so without the
	// coverage check the copy would admit the write (and every later one), which the quorum read refuses: the
	// Lease is at 2. The webhook decides on the copy only a write to an object the policy already covered.
	t.Run("a stale holder labels an object into the policy's selector", func(t *testing.T) {
		ns, _, r2, c1 := a.staleHolder(t, fenced, "in", fenced)
		createConfigMap(t, c1, ns, "out", nil)
		onCopy(t, "objects", "replica-1's write of a covered ConfigMap at epoch 1", func() error {
			return patchConfigMap(t, c1, ns, "in", `{"data":{"v":"one"}}`)
		})

		a.s.set(true)
		acquireAndFence(t, r2, ns, "l", 2)
		if got := objectEpoch(t, ns, "out"); got != "1" {
			t.Fatalf("the uncovered ConfigMap's epoch record is %q after replica-2's fence, want 1 (not raised)", got)
		}
		mustContain(t, "replica-1 labels the ConfigMap into the selector at epoch 1, the copy stalled at epoch 1",
			patchConfigMap(t, c1, ns, "out", `{"metadata":{"labels":{"app":"fenced"}},"data":{"v":"late"}}`), fencing.IsStale, "stale epoch 1")
		mustContain(t, "replica-1's write of a covered ConfigMap after replica-2's fence", patchConfigMap(t, c1, ns, "in", `{"data":{"v":"late"}}`),
			fencing.IsStale, "stale epoch 1")
		a.s.set(false)
	})

	// Closed: a stale holder labels a covered object OUT of the selector while the copy lags a takeover.
	// The new holder's fence-on-acquire lists by selector, so it would never raise the object, and the old
	// holder's later writes to it (no longer covered) would win over the new holder's. A write that changes
	// coverage is decided on a quorum read, which refuses it.
	t.Run("a stale holder labels an object out of the policy's selector", func(t *testing.T) {
		ns, _, r2, c1 := a.staleHolder(t, fenced, "in", fenced)
		onCopy(t, "objects", "replica-1's write of a covered ConfigMap at epoch 1", func() error {
			return patchConfigMap(t, c1, ns, "in", `{"data":{"v":"one"}}`)
		})

		a.s.set(true)
		t2 := r2.Acquire(t, ns, "l", 2)
		mustContain(t, "replica-1 labels the ConfigMap out of the selector at epoch 1, the copy stalled at epoch 1",
			patchConfigMap(t, c1, ns, "in", `{"metadata":{"labels":{"app":null}}}`), fencing.IsStale, "stale epoch 1")
		fenceObjects(t, r2, t2)
		if got := objectEpoch(t, ns, "in"); got != "2" {
			t.Fatalf("the ConfigMap's epoch record is %q after replica-2's fence, want 2 (still covered, raised)", got)
		}
		mustContain(t, "replica-1's write after replica-2's fence", patchConfigMap(t, c1, ns, "in", `{"data":{"v":"late"}}`),
			fencing.IsStale, "stale epoch 1")
		a.s.set(false)
	})

	// The declaration is per kind: a Lease that declares only FencedResources promises nothing about its
	// FencingPolicy objects (its electors need not run FenceObjectsOnAcquire), and the other way round. A
	// stale write of the undeclared kind is refused at once from the quorum read, though the stalled copy
	// shows the stale epoch and a declaration.
	t.Run("a declaration of the other kind decides nothing", func(t *testing.T) {
		for _, declared := range []protocol.Fences{{FencedResources: true}, objects} {
			ns := a.namespace(t)
			r1, r2 := replicas(t, ns)
			r1.Fences, r2.Fences = declared, declared
			configMapPolicy(t, ns, "l", nil, r1.User)
			key := declare(t, ns, "r", "l")
			t1, c1 := holderClient(t, r1, ns, "l", 1)
			createConfigMap(t, c1, ns, "cm", nil)
			writer := fencing.NewWriter(r1.Client)
			set := func(v string) error {
				_, err := writer.Set(ctx, t1, key, map[string]any{"v": v})
				return err
			}
			if err := set("one"); err != nil {
				t.Fatal(err)
			}
			a.seen(t, ns, "l", 1, r1.Holder)
			hook, write := "fencedresources", set
			if declared.Objects {
				hook, write = "objects", func(v string) error {
					return patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"`+v+`"}}`)
				}
			}
			onCopy(t, hook, "replica-1's write of the declared kind at epoch 1", func() error { return write("one") })

			a.s.set(true)
			r2.Acquire(t, ns, "l", 2) // fences nothing: the test shows the kind it declared needs no fence here
			if declared.Objects {
				mustContain(t, "replica-1's FencedResource write, Lease declaring objects", set("late"), fencing.IsStale, "stale epoch 1: lease l is at epoch 2")
			} else {
				mustContain(t, "replica-1's ConfigMap write, Lease declaring FencedResources", patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"late"}}`),
					fencing.IsStale, "stale epoch 1: lease l is at epoch 2")
			}
		}
		a.s.set(false)
	})

	// RESIDUAL (the race of a create admitted before an acquisition and committed after its fence listed,
	// here for an update that labels an object in): the stale holder's write that
	// labels an object into the selector is decided on the quorum read while the Lease is still at epoch 1,
	// and admitted; its commit waits (here, on a second webhook) until after replica-2 has acquired epoch 2
	// and its fence has listed the covered objects, so the object is covered at epoch 1 and never raised.
	// The stale holder's next write is then admitted on the stalled copy, as a write to an object created in
	// that window would be; the quorum read refuses it.
	t.Run("a write that labels an object in, committed after the fence listed, residual", func(t *testing.T) {
		ns, _, r2, c1 := a.staleHolder(t, fenced, "slow", nil)
		arrived, release := holdUpdates(t, ns, "slow")

		answered := webhookAnswers(t, webhook.ObjectsPath)
		labelled := make(chan error, 1)
		go func() {
			labelled <- patchConfigMap(t, c1, ns, "slow", `{"metadata":{"labels":{"app":"fenced"}},"data":{"v":"one"}}`)
		}()
		<-arrived
		testenv.Eventually(t, "fencekit's webhook has decided the labelling write", func() (bool, string) {
			n := webhookAnswers(t, webhook.ObjectsPath)
			return n > answered, fmt.Sprintf("%v answers, %v before", n, answered)
		})

		a.s.set(true)
		acquireAndFence(t, r2, ns, "l", 2)
		release()
		if err := <-labelled; err != nil {
			t.Fatalf("the labelling write decided at epoch 1: %v", err)
		}
		if got := objectEpoch(t, ns, "slow"); got != "1" {
			t.Fatalf("the labelled ConfigMap records epoch %q, want 1 (committed after the fence listed)", got)
		}
		admittedOnCopy(t, "objects", "replica-1's write at epoch 1 to the ConfigMap labelled in", func() error { return patchConfigMap(t, c1, ns, "slow", `{"data":{"v":"late"}}`) })
		a.s.set(false)
		a.seen(t, ns, "l", 2, r2.Holder)
		mustContain(t, "replica-1's write once the copy shows epoch 2", patchConfigMap(t, c1, ns, "slow", `{"data":{"v":"later"}}`),
			fencing.IsStale, "stale epoch 1")
	})

	// HOLE (closed): a FencingPolicy widened after an acquisition covers objects that acquisition's fence
	// did not list. An object written at epoch 1 outside the policy (free) and covered by the widened policy
	// still records 1, and the copy (stalled) shows the Lease at 1, declaring objects: before the policy's
	// coverage epoch, the copy admitted the stale holder's write, which the quorum read refuses (the Lease is
	// at 2). The operator now records, per policy generation, the Lease's epoch read from the apiserver when
	// it saw that generation (status.coverageEpoch); the copy decides only above it, so every write of the
	// widened policy's objects is decided on a quorum read until the next acquisition, whose fence lists
	// them. Then the copy decides again.
	t.Run("a policy widened after the takeover", func(t *testing.T) {
		ns, r1, r2, c1 := a.staleHolder(t, fenced, "out", nil)
		p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}

		a.s.set(true)
		t2 := acquireAndFence(t, r2, ns, "l", 2)
		setPolicySelector(t, p, nil) // every ConfigMap of the namespace
		probes := 0
		testenv.Eventually(t, "the webhook covers the ConfigMap outside the old selector", func() (bool, string) {
			probes++
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "out"}}
			err := env.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"probe":"%d"}}`, probes)), client.DryRunAll)
			return fencing.IsTokenMissing(err), testenv.ErrString(err)
		})
		testenv.Eventually(t, "the operator records the widened policy's coverage epoch", func() (bool, string) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return false, err.Error()
			}
			return p.Status.CoverageGeneration == p.Generation && p.Status.CoverageEpoch == 2,
				fmt.Sprintf("generation %d, coverage generation %d, coverage epoch %d", p.Generation, p.Status.CoverageGeneration, p.Status.CoverageEpoch)
		})
		quorum := leaseReads(t, "objects", "apiserver")
		mustContain(t, "replica-1's write at epoch 1 after the policy covers it, the copy stalled", patchConfigMap(t, c1, ns, "out", `{"data":{"v":"late"}}`),
			fencing.IsStale, "stale epoch 1")
		if got := leaseReads(t, "objects", "apiserver"); got <= quorum {
			t.Errorf("the stale write was not decided on a quorum read (%v quorum reads, %v before)", got, quorum)
		}
		c2 := fencing.NewClient(r2.Client, tokenOf(t2))
		if err := patchConfigMap(t, c2, ns, "out", `{"data":{"v":"two"}}`); err != nil {
			t.Errorf("the holder's write at epoch 2 to the newly covered ConfigMap: %v", err)
		}

		// The next acquisition lists the widened policy's objects: the copy decides again.
		a.s.set(false)
		t3 := acquireAndFence(t, r1, ns, "l", 3)
		a.seen(t, ns, "l", 3, r1.Holder)
		c3 := fencing.NewClient(r1.Client, tokenOf(t3))
		onCopy(t, "objects", "the holder's write at epoch 3", func() error { return patchConfigMap(t, c3, ns, "out", `{"data":{"v":"three"}}`) })
		if got := readConfigMap(t, ns, "out").Data["v"]; got != "three" {
			t.Errorf("the ConfigMap holds %q, want the holder's three", got)
		}
	})

	// RESIDUAL (a divergence, not a fencing hole): the holder released the Lease at epoch 1. The quorum read
	// refuses its later writes (no holder); the stalled copy still shows it holding epoch 1 and admits them.
	// No other holder has a token until an acquisition at 2, whose fence-on-acquire orders these writes
	// before its token, as for any write admitted on the copy; then they are refused.
	t.Run("the holder writes after releasing, residual", func(t *testing.T) {
		ns := a.namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Fences, r2.Fences = protocol.Fences{FencedResources: true}, protocol.Fences{FencedResources: true}
		key := declare(t, ns, "r", "l")
		t1 := r1.Acquire(t, ns, "l", 1)
		writer := fencing.NewWriter(r1.Client)
		set := func(tok elector.Token, v string) error {
			_, err := writer.Set(ctx, tok, key, map[string]any{"v": v})
			return err
		}
		a.seen(t, ns, "l", 1, r1.Holder)
		onCopy(t, "fencedresources", "replica-1's write at epoch 1", func() error { return set(t1, "one") })

		a.s.set(true)
		r1.Release(t, t1)
		admittedOnCopy(t, "fencedresources", "replica-1's write after its release", func() error { return set(t1, "after-release") })
		t2 := r2.Acquire(t, ns, "l", 2)
		if err := fencing.FenceOnAcquire(r2.Client).Raise(ctx, t2); err != nil {
			t.Fatal(err)
		}
		mustContain(t, "replica-1's write after replica-2's fence-on-acquire", set(t1, "late"), nil, "stale epoch 1")
		a.s.set(false)
		a.seen(t, ns, "l", 2, "")
		mustContain(t, "replica-1's write once the copy caught up", set(t1, "later"), nil, "stale epoch 1")
	})

	// RESIDUAL: the Lease is deleted and created again by an elector that declares nothing (a create is not
	// held to the old Lease's declaration: the policy has no old object). The operator protects a Lease that
	// FencingPolicies are bound to with its finalizer, so this takes a namespace admin who deletes the Lease
	// and removes the finalizer (not break glass). The stalled copy still shows the
	// old Lease at epoch 1 declaring objects, so the stale holder's writes are admitted, though the new Lease
	// is at a higher epoch and its holder fenced nothing; the quorum read refuses them. They are refused once
	// the copy sees the deletion.
	t.Run("the Lease is deleted and recreated without the declaration, residual", func(t *testing.T) {
		ns := a.namespace(t)
		r1, r2 := replicas(t, ns)
		r1.Fences = objects
		configMapPolicy(t, ns, "l", nil, r1.User)
		_, c1 := holderClient(t, r1, ns, "l", 1)
		createConfigMap(t, c1, ns, "cm", nil)
		a.seen(t, ns, "l", 1, r1.Holder)
		onCopy(t, "objects", "replica-1's write at epoch 1", func() error { return patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"one"}}`) })

		a.s.set(true)
		deleteLeaseOverridingProtection(t, ns, "l")
		r2.Acquire(t, ns, "l", 1000) // a create chooses its starting epoch; the elector seeds a resourceVersion
		if l := env.ReadLease(t, ns, "l"); l.Annotations[protocol.FencesAnnotation] != "" {
			t.Fatalf("the recreated Lease declares %q, want nothing", l.Annotations[protocol.FencesAnnotation])
		}
		admittedOnCopy(t, "objects", "replica-1's write at epoch 1 after the recreation", func() error { return patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"late"}}`) })
		a.s.set(false)
		a.seen(t, ns, "l", 1000, "")
		mustContain(t, "replica-1's write once the copy shows the new Lease", patchConfigMap(t, c1, ns, "cm", `{"data":{"v":"later"}}`),
			fencing.IsStale, "stale epoch 1")
	})

	// CLOSED (was the precondition of the one above): any user with the fencekit-elector role, which grants
	// no delete, could get a fenced Lease deleted by adding an ownerReference to an owner that does not
	// exist (kube-controller-manager's garbage collector then deletes the Lease; envtest runs none). The
	// Lease policy refuses any change of a fenced Lease's ownerReferences. Removing the protect
	// finalizer alone stays possible (the policy leaves other metadata free for the operator): it only stops
	// delaying a deletion, which the role cannot start.
	t.Run("the elector role cannot hand a fenced Lease to the garbage collector", func(t *testing.T) {
		ns := a.namespace(t)
		r1, _ := replicas(t, ns)
		other := newWorker(t, ns, "worker-b")
		declare(t, ns, "r", "l")
		r1.Acquire(t, ns, "l", 1)
		testenv.Eventually(t, "the protector puts its finalizer on the bound Lease", func() (bool, string) {
			l := env.ReadLease(t, ns, "l")
			return slices.Contains(l.Finalizers, controllers.LeaseFinalizer), fmt.Sprint(l.Finalizers)
		})
		l := env.ReadLease(t, ns, "l")
		l.OwnerReferences = append(l.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "gone",
			UID: types.UID("00000000-0000-0000-0000-000000000000")})
		testenv.WantPolicy(t, other.Client.Update(ctx, l), "fenced lease l: its ownerReferences cannot be set or changed")
		testenv.WantPolicy(t, r1.Client.Update(ctx, l), "fenced lease l: its ownerReferences cannot be set or changed")
		l = env.ReadLease(t, ns, "l")
		l.Finalizers = slices.DeleteFunc(l.Finalizers, func(f string) bool { return f == controllers.LeaseFinalizer })
		if err := other.Client.Update(ctx, l); err != nil {
			t.Fatalf("another elector-role user removing the protect finalizer: %v (the policy leaves it free for the operator)", err)
		}
		if err := other.Client.Delete(ctx, l); !apierrors.IsForbidden(err) {
			t.Fatalf("another elector-role user deleting the Lease: %v, want Forbidden by RBAC", err)
		}
	})

	// RESIDUAL: break glass is exempt from the Lease policy. An admin who takes the Lease over at a new
	// epoch by hand (or with an elector that declares nothing), dropping the declaration and fencing nothing,
	// does not stop the stale holder while the copy lags: its writes are admitted on the copy, which still
	// shows epoch 1 declaring FencedResources, though the quorum read refuses them. A break-glass takeover
	// must run fence-on-acquire itself (keeping the declaration does not help: it is a promise, not a fence).
	t.Run("break glass takes over dropping the declaration, residual", func(t *testing.T) {
		ns := a.namespace(t)
		r1, _ := replicas(t, ns)
		r1.Fences = protocol.Fences{FencedResources: true}
		key := declare(t, ns, "r", "l")
		t1 := r1.Acquire(t, ns, "l", 1)
		writer := fencing.NewWriter(r1.Client)
		set := func(v string) error {
			_, err := writer.Set(ctx, t1, key, map[string]any{"v": v})
			return err
		}
		a.seen(t, ns, "l", 1, r1.Holder)
		onCopy(t, "fencedresources", "replica-1's write at epoch 1", func() error { return set("one") })

		a.s.set(true)
		l := env.ReadLease(t, ns, "l")
		testenv.AcquiredBy(l, "oncall", "oncall", 2, 15*time.Second)
		delete(l.Annotations, protocol.FencesAnnotation)
		if err := env.Client.Update(ctx, l, testenv.Presenting(2)); err != nil {
			t.Fatalf("break glass taking the Lease over at epoch 2: %v", err)
		}
		admittedOnCopy(t, "fencedresources", "replica-1's write after the break-glass takeover", func() error { return set("late") })
		a.s.set(false)
		a.seen(t, ns, "l", 2, "oncall")
		mustContain(t, "replica-1's write once the copy shows epoch 2", set("later"), fencing.IsStale, "stale epoch 1")
	})
}
