package fencing_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

// TestMain starts a control plane only when benchmarks were asked for: `go test ./...` (make test) finds
// no tests here and must not pay for one.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy())
}

// unlimited returns cfg without client-side rate limiting, as controller-runtime's GetConfig does for the
// operator (QPS -1: the apiserver's priority and fairness applies instead). client-go's default (5 QPS,
// burst 10) would measure the client, not fencekit.
func unlimited(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

// worker is a lease holder (see testenv.Worker) whose client has no client-side rate limit and whose
// Leases last an hour, so that they stay live through a benchmark without renewals.
type worker = testenv.Worker

func newWorker(b *testing.B, ns, holder string) worker {
	b.Helper()
	w := env.NewWorker(b, ns, holder)
	w.Config = unlimited(w.Config)
	c, err := client.New(w.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w.Client, w.LeaseDuration = c, time.Hour
	return w
}

func declare(b *testing.B, ns, name, lease string) types.NamespacedName {
	b.Helper()
	return env.Declare(b, ns, name, lease)
}

// The ValidatingWebhookConfiguration envtest installed, kept to restore it after a CEL-only phase.
var webhookConfig *admissionregistrationv1.ValidatingWebhookConfiguration

// probe is a FencedResource bound to a Lease that never exists: the webhook refuses any write of its data
// (no token, and no lease), while the CRD alone admits it. Writing it tells whether the webhook is in effect.
var probeSeq int

func webhookInEffect(ctx context.Context) (bool, error) {
	probe := &fencingv1alpha1.FencedResource{
		ObjectMeta: metav1.ObjectMeta{Name: "fencekit-bench-probe", Namespace: "default"},
		Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "fencekit-bench-no-such-lease"},
	}
	err := env.Client.Create(ctx, probe)
	if err == nil || apierrors.IsAlreadyExists(err) {
		probeSeq++
		patch := fmt.Sprintf(`{"spec":{"data":{"n":%d}}}`, probeSeq)
		err = env.Client.Patch(ctx, probe, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	switch {
	case err == nil:
		return false, nil
	case fencing.IsFenced(err), strings.Contains(err.Error(), `failed calling webhook "vfencedresource`):
		// Refused by the webhook, or by the apiserver failing to call it (no server): in effect.
		return true, nil
	default:
		return false, err
	}
}

// setWebhook installs (on) or deletes (off) fencekit's ValidatingWebhookConfiguration and waits until the
// apiserver acts on it (it reloads webhook configurations asynchronously).
func setWebhook(b *testing.B, on bool) {
	b.Helper()
	ctx := b.Context()
	if webhookConfig == nil {
		var list admissionregistrationv1.ValidatingWebhookConfigurationList
		if err := env.Client.List(ctx, &list); err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			for _, w := range list.Items[i].Webhooks {
				if w.Name == "vfencedresource-v1alpha1.fencing.fencekit.io" {
					webhookConfig = list.Items[i].DeepCopy()
				}
			}
		}
		if webhookConfig == nil {
			b.Fatal("fencekit's ValidatingWebhookConfiguration is not installed")
		}
	}
	var current admissionregistrationv1.ValidatingWebhookConfiguration
	err := env.Client.Get(ctx, client.ObjectKeyFromObject(webhookConfig), &current)
	switch {
	case on && apierrors.IsNotFound(err):
		c := webhookConfig.DeepCopy()
		c.ResourceVersion, c.UID, c.CreationTimestamp, c.ManagedFields = "", "", metav1.Time{}, nil
		err = env.Client.Create(ctx, c)
	case !on && err == nil:
		err = env.Client.Delete(ctx, &current)
	case !on && apierrors.IsNotFound(err):
		err = nil // already off
	}
	if err != nil {
		b.Fatal(err)
	}
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		in, err := webhookInEffect(ctx)
		last = err
		return err == nil && in == on, nil
	}); err != nil {
		b.Fatalf("the webhook never came into effect = %v: %v", on, last)
	}
}

// quantile is the nearest-rank q-quantile of ds, which it sorts.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// waitForStatuses polls the FencedResources of ns every interval until exactly n of them satisfy ok
// (they have what want says), and fails b if that does not happen within timeout.
func waitForStatuses(b *testing.B, c client.Client, ns string, n int, interval, timeout time.Duration, want string, ok func(*fencingv1alpha1.FencedResource) bool) {
	b.Helper()
	var seen int
	if err := wait.PollUntilContextTimeout(b.Context(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		var list fencingv1alpha1.FencedResourceList
		if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, nil //nolint:nilerr // polling on: a failed list is retried
		}
		seen = 0
		for i := range list.Items {
			if ok(&list.Items[i]) {
				seen++
			}
		}
		return seen == n, nil
	}); err != nil {
		b.Fatalf("%d of %d FencedResources in %s had %s after %v", seen, n, ns, want, timeout)
	}
}
