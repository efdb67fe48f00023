package fencing_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// boundResources is the number of resources bound to the Lease in the fence-on-acquire tests at client-go's
// default QPS: behind its token bucket (5 QPS, burst 10) they took about 18 s, past the elector's default
// PostAcquireTimeout of 10 s.
const boundResources = 100

// defaultQPSConfig is an admin rest.Config with client-go's default client-side rate limit (QPS and Burst
// unset: 5 QPS, burst 10), as rest.InClusterConfig and clientcmd.BuildConfigFromFlags return it, whose
// requests for path (a substring) are counted by method.
func defaultQPSConfig(path string) (*rest.Config, *requestCounter) {
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = 0, 0, nil
	n := &requestCounter{byMethod: map[string]int{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			if strings.Contains(r.URL.Path, path) {
				n.add(r.Method)
			}
			return rt.RoundTrip(r)
		})
	})
	return cfg, n
}

type requestCounter struct {
	mu       sync.Mutex
	byMethod map[string]int
}

func (n *requestCounter) add(method string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.byMethod[method]++
}

func (n *requestCounter) get(method string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byMethod[method]
}

// leadWithDefaults runs an elector with every timing at its default (PostAcquireTimeout = RenewDeadline =
// 10 s) on lease ns/lease, its clientset built from cfg, with fence as PostAcquire, and returns the outcome
// of the first acquisition: the hook's error, and the token OnStartedLeading received if leadership was
// reported. The elector releases the Lease when the test ends.
func leadWithDefaults(t *testing.T, cfg *rest.Config, ns, lease string, fence elector.AcquireFence) (elector.Token, error) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hooked := make(chan error, 1)
	led := make(chan elector.Token, 1)
	e, err := elector.New(elector.Config{
		Client: cs, Namespace: ns, Name: lease, Identity: "bulk-holder",
		PostAcquire: fence.Observe(func(context.Context, elector.Token) func(error) {
			return func(err error) {
				select {
				case hooked <- err:
				default: // a later acquisition: only the first one is judged
				}
			}
		}),
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			led <- tok
			<-ctx.Done()
		},
	}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-stopped })

	// The elector bounds the hook by PostAcquireTimeout; this bound only keeps a broken elector from hanging
	// the test.
	select {
	case err := <-hooked:
		if err != nil {
			return elector.Token{}, err
		}
	case <-time.After(testenv.EventuallyTimeout + elector.DefaultRenewDeadline):
		t.Fatalf("the elector never ran PostAcquire on lease %s/%s", ns, lease)
	}
	select {
	case tok := <-led:
		return tok, nil
	case <-time.After(testenv.EventuallyTimeout):
		t.Fatalf("PostAcquire succeeded but leadership of lease %s/%s was never reported", ns, lease)
		return elector.Token{}, nil
	}
}

// fenceAtDefaultQPS leads ns/lease with leadWithDefaults, fenced by the hook newFence builds from
// defaultQPSConfig(path), and returns the token it led with. The hook must raise the boundResources
// objects (what names them) with wantLists lists and one patch each, within the PostAcquire timeout.
func fenceAtDefaultQPS(t *testing.T, ns, lease, path, what string, wantLists int, newFence func(*rest.Config) (elector.AcquireFence, error)) elector.Token {
	t.Helper()
	cfg, requests := defaultQPSConfig(path)
	hook, err := newFence(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := leadWithDefaults(t, cfg, ns, lease, hook)
	if err != nil {
		t.Fatalf("fence-on-acquire of %d %s at client-go's default QPS: %v", boundResources, what, err)
	}
	if gets, patches := requests.get(http.MethodGet), requests.get(http.MethodPatch); gets != wantLists || patches != boundResources {
		t.Errorf("the fence sent %d GET and %d PATCH requests for %s, want %d lists and %d patches", gets, patches, what, wantLists, boundResources)
	}
	return tok
}

// TestFenceOnAcquireForConfigDefaultQPS: a workload whose rest.Config keeps client-go's default client-side
// rate limit leads a Lease that 100 FencedResources are bound to, with the elector's defaults. The hook
// built by FenceOnAcquireForConfig from that config raises all of them within the PostAcquire timeout, so
// leadership is reported at the new epoch, with 2 lists (the resources a holder wrote, then the
// declarations) and 100 patches. (FenceOnAcquire with a client built
// from the same config needs about 18 s: the elector abandons it at 10 s and never reports leadership.)
func TestFenceOnAcquireForConfigDefaultQPS(t *testing.T) {
	ns := env.Namespace(t)
	const lease = "bulk-writer"
	for i := range boundResources {
		env.Declare(t, ns, fmt.Sprintf("bulk-%03d", i), lease)
	}
	tok := fenceAtDefaultQPS(t, ns, lease, "/fencedresources", "FencedResources", 2, fencing.FenceOnAcquireForConfig)

	var list fencingv1alpha1.FencedResourceList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != boundResources {
		t.Fatalf("%d FencedResources in namespace %s, want %d", len(list.Items), ns, boundResources)
	}
	for _, fr := range list.Items {
		if fr.Spec.FencedEpoch() != tok.Epoch || fr.Annotations[fencingv1alpha1.WriterAnnotation] != tok.Holder {
			t.Errorf("FencedResource %s at epoch %d written by %q, want epoch %d by %q",
				fr.Name, fr.Spec.FencedEpoch(), fr.Annotations[fencingv1alpha1.WriterAnnotation], tok.Epoch, tok.Holder)
		}
	}
}

// TestFenceObjectsOnAcquireForConfigDefaultQPS: the same for 100 ConfigMaps declared by a FencingPolicy,
// raised by the hook FenceObjectsOnAcquireForConfig builds: 1 list of policies, 1 list of ConfigMaps and
// 100 patches, all within the default PostAcquire timeout.
func TestFenceObjectsOnAcquireForConfigDefaultQPS(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "bulk-objects"
	policy := &fencingv1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bulk"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: []fencingv1alpha1.FencedObjects{{
			Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"fenced": "yes"}},
		}}},
	}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatal(err)
	}
	for i := range boundResources {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("bulk-%03d", i), Labels: map[string]string{"fenced": "yes"}}}
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	tok := fenceAtDefaultQPS(t, ns, lease, "/namespaces/"+ns+"/configmaps", "ConfigMaps", 1, fencing.FenceObjectsOnAcquireForConfig)

	var list corev1.ConfigMapList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"fenced": "yes"}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != boundResources {
		t.Fatalf("%d declared ConfigMaps in namespace %s, want %d", len(list.Items), ns, boundResources)
	}
	want := strconv.FormatInt(tok.Epoch, 10)
	for _, cm := range list.Items {
		if got := cm.Annotations[fencingv1alpha1.ObjectEpochAnnotation]; got != want {
			t.Errorf("ConfigMap %s has epoch record %q, want %q", cm.Name, got, want)
		}
	}
}
