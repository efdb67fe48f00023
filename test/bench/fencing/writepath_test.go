package fencing_test

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/controllers"
)

// BenchmarkWritePath splits the cost of a FencedResource write with the CRD's rule only (no webhook, no
// operator running) against the same user's merge patch of a ConfigMap, in one run: the same fenced merge
// patch of a resource without status, of one with the operator's status but no conditions, and of one with
// the operator's full status (three conditions), as the operator leaves every resource. Each kind of
// write runs 200 times (after 25 warm-up writes) in each of 4 rounds, one kind after the other, and is
// reported as its p50 and its p50's ratio to the ConfigMap's.
func BenchmarkWritePath(b *testing.B) {
	ctx := b.Context()
	setWebhook(b, false)
	defer setWebhook(b, true)
	ns := env.Namespace(b)
	holder := newWorker(b, ns, "holder")
	tok := holder.Acquire(b, ns, "bench-writer", 1)
	grantConfigMaps(b, ns, holder.User)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-baseline", Namespace: ns}}
	if err := env.Client.Create(ctx, cm); err != nil {
		b.Fatal(err)
	}
	var lease coordinationv1.Lease
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bench-writer"}, &lease); err != nil {
		b.Fatal(err)
	}
	// withStatus declares a resource and writes the status the operator would give it.
	withStatus := func(name string, conditions bool) types.NamespacedName {
		key := declare(b, ns, name, "bench-writer")
		var fr fencingv1alpha1.FencedResource
		if err := env.Client.Get(ctx, key, &fr); err != nil {
			b.Fatal(err)
		}
		patch := client.MergeFrom(fr.DeepCopy())
		fr.Status = controllers.ComputeStatus(&fr, &lease)
		if !conditions {
			fr.Status.Conditions = nil
		}
		if err := env.Client.Status().Patch(ctx, &fr, patch); err != nil {
			b.Fatal(err)
		}
		return key
	}
	bare := declare(b, ns, "no-status", "bench-writer")
	noConditions := withStatus("status-no-conditions", false)
	full := withStatus("full-status", true)

	seq := 0
	fenced := func(key types.NamespacedName) func() error {
		return func() error {
			fr := &fencingv1alpha1.FencedResource{}
			fr.Namespace, fr.Name = key.Namespace, key.Name
			p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"epoch":%d,"data":{"seq":%d,"by":%q}}}`,
				fencingv1alpha1.WriterAnnotation, tok.Holder, tok.Epoch, seq, tok.Holder)
			return holder.Client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner(tok.FieldManager()))
		}
	}
	kinds := []struct {
		name  string
		write func() error
	}{
		{"configmap", func() error {
			p := fmt.Sprintf(`{"data":{"seq":"%d","by":%q}}`, seq, tok.Holder)
			return holder.Client.Patch(ctx, cm.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(p)))
		}},
		{"fenced-no-status", fenced(bare)},
		{"fenced-status-no-conditions", fenced(noConditions)},
		{"fenced-full-status", fenced(full)},
	}
	ds := map[string][]time.Duration{}
	for range 4 {
		for _, k := range kinds {
			for i := range 225 {
				seq++
				t0 := time.Now()
				if err := k.write(); err != nil {
					b.Fatalf("%s: %v", k.name, err)
				}
				if i >= 25 {
					ds[k.name] = append(ds[k.name], time.Since(t0))
				}
			}
		}
	}
	base := ms(quantile(ds["configmap"], 0.5))
	for _, k := range kinds {
		p50 := ms(quantile(ds[k.name], 0.5))
		b.ReportMetric(p50, k.name+"-p50-ms")
		if k.name != "configmap" {
			b.ReportMetric(p50/base, k.name+"/configmap-p50-x")
		}
	}
}
