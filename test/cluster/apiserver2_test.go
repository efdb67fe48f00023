package cluster

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// takeovers is how many times the Lease changes hands in TestStaleWritesThroughSecondAPIServer; each
// takeover is followed by two stale writes (a FencedResource, a ConfigMap).
const takeovers = 60

// TestStaleWritesThroughSecondAPIServer: two replicas of one ServiceAccount take the Lease from each other
// through the first kube-apiserver; right after each takeover the replica that lost it writes, with its
// old token, through a second kube-apiserver on the same etcd (its own watch cache and informers): a
// FencedResource and a ConfigMap declared by a FencingPolicy. Every stale write is refused as stale, with
// kube-controller-manager running.
func TestStaleWritesThroughSecondAPIServer(t *testing.T) {
	second := env.SecondAPIServer(t)
	h := NewHolder(t, env, FencedConfigMap("probe"), []rbacv1.PolicyRule{All("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps"})
	ctx := t.Context()
	key := env.Declare(t, h.NS, "orders", AppLease)
	r := [2]testenv.Worker{h.Worker, h.Worker}
	r[0].Holder, r[1].Holder = "replica-0", "replica-1"
	// Each replica's client through the second apiserver: the same user, another address.
	var via2 [2]client.Client
	for i := range r {
		cfg := rest.CopyConfig(r[i].Config)
		cfg.Host = second.Config.Host
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		via2[i] = c
	}
	cm := FencedConfigMap("state")
	cm.Namespace = h.NS
	tok := r[0].Acquire(t, h.NS, AppLease, 1)
	testenv.Eventually(t, "replica-0 creates the ConfigMap at epoch 1", func() (bool, string) {
		err := fencing.NewClient(r[0].Client, func() elector.Token { return tok }).Create(ctx, cm.DeepCopy())
		return err == nil, testenv.ErrString(err)
	})
	refused := 0
	for i := 1; i <= takeovers; i++ {
		old, next := r[(i-1)%2], r[i%2]
		oldTok := tok
		tok = next.Acquire(t, h.NS, AppLease, int64(i+1))
		_, err := fencing.NewWriter(via2[(i-1)%2]).Set(ctx, oldTok, key, map[string]any{"by": old.Holder, "epoch": oldTok.Epoch})
		if !fencing.IsStale(err) {
			t.Errorf("takeover %d: %s's FencedResource write at epoch %d through the second apiserver: %v, want refused as stale", i, old.Holder, oldTok.Epoch, testenv.ErrString(err))
		} else {
			refused++
		}
		var live corev1.ConfigMap
		stale := fencing.NewClient(via2[(i-1)%2], func() elector.Token { return oldTok })
		if err := stale.Get(ctx, client.ObjectKeyFromObject(cm), &live); err != nil {
			t.Fatal(err)
		}
		live.Data = map[string]string{"by": old.Holder, "epoch": fmt.Sprint(oldTok.Epoch)}
		if err := stale.Update(ctx, &live); !fencing.IsStale(err) {
			t.Errorf("takeover %d: %s's ConfigMap update at epoch %d through the second apiserver: %v, want refused as stale", i, old.Holder, oldTok.Epoch, testenv.ErrString(err))
		} else {
			refused++
		}
	}
	t.Logf("%d of %d stale writes through the second apiserver refused", refused, 2*takeovers)
	var got corev1.ConfigMap
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
		t.Fatal(err)
	}
	if got.Data["v"] != "1" || got.Data["by"] != "" {
		t.Errorf("the ConfigMap holds %v, want replica-0's first write", got.Data)
	}
}
