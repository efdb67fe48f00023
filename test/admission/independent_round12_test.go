//go:build openholes

package admission_test

// Round 12 of the independent attacker: the three attempts that held, each a storm or a pad that takes its
// time (outside make test: run with -tags openholes). Each asserts the invariant it tries to break. The six
// that worked are closed and run in make test (round12_closed_test.go).

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound12RepeatDeletesStormTheFinalizerRemoval: persona: a user with delete RBAC on FencedResources
// (not the holder, no token). Route: DELETE requests without options of the holder's FencedResource while it
// is being deleted (the holder's Writer.Delete was admitted; the holder's own finalizer keeps it): a
// "second DELETE is free only if its options leave the deletion as it is" (decideDelete admits it before any
// hold is looked at), but the apiserver answers a DELETE of an object with finalizers by writing it again
// (markAsDeleting sets deletionTimestamp to now), which changes its resourceVersion. Invariant I2 (nothing
// admitted without the token can make the holder's next write fail): the holder removes its finalizer with
// NewClient's compare-and-swap Update (read, remove, update; again on a conflict, which arms the hold), for
// up to 5 s, while the DELETEs run from two goroutines: it must succeed.
// Observed (d650cf8): HELD. A repeat DELETE in the same second left the resourceVersion as it was
// (626 -> 626); one a second later changed it (-> 628): at most one change per second. Under a storm of
// 29 admitted repeat DELETEs the holder's removal succeeded on its first try (19 ms).
func TestRound12RepeatDeletesStormTheFinalizerRemoval(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "deleter")
	tok := holder.Acquire(t, ns, "l", 1)
	w := fencing.NewWriter(holder.Client)
	deleter := round11Unthrottled(t, "deleter")
	key := declare(t, ns, "orders", "l")
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	if err := mergePatch(t, holder.Client, key, `{"metadata":{"finalizers":["example.com/cleanup"]}}`, testenv.Presenting(1)); err != nil {
		t.Fatalf("the holder's finalizer: %v", err)
	}
	if err := w.Delete(ctx, tok, key); err != nil {
		t.Fatalf("the holder's delete: %v", err)
	}
	rv0 := get(t, key).ResourceVersion
	frOf := func() *fencingv1alpha1.FencedResource {
		return &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}
	}
	err1 := retryRBAC(t, "the deleter's repeat DELETE", func() error { return deleter.Delete(ctx, frOf()) })
	rv1 := get(t, key).ResourceVersion
	time.Sleep(1100 * time.Millisecond)
	err2 := deleter.Delete(ctx, frOf())
	rv2 := get(t, key).ResourceVersion
	t.Logf("repeat DELETEs without options: %v (resourceVersion %s -> %s), a second later %v (-> %s)", round9Short(err1), rv0, rv1, round9Short(err2), rv2)
	admitted, firstErr, stop := round11Storm(t, 2, func(ctx context.Context, _, _ int) error { return deleter.Delete(ctx, frOf()) })
	testenv.Eventually(t, "the storm", func() (bool, string) { return admitted.Load() > 20, fmt.Sprint(admitted.Load(), firstErr()) })
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start, tries := time.Now(), 0
	var err error
	for {
		tries++
		var fr fencingv1alpha1.FencedResource
		err = holder.Client.Get(rctx, key, &fr)
		if err == nil {
			fr.Finalizers = nil
			err = fenced.Update(rctx, &fr)
		}
		if err == nil || !apierrors.IsConflict(err) || rctx.Err() != nil {
			break
		}
	}
	took := time.Since(start)
	stop()
	t.Logf("storm: %d repeat DELETEs admitted (first refusal %q); the holder's finalizer removal: %v after %d tries in %v",
		admitted.Load(), firstErr(), round9Short(err), tries, took.Round(time.Millisecond))
	if err != nil {
		t.Errorf("repeat DELETEs without the token failed the holder's compare-and-swap removal of its finalizer (I2): %v", round9Short(err))
	}
}

// TestRound12PaddedAcquisitionLocksTheLeaseOut: as TestRound12PaddingRidesAnAcquisition, pushed to etcd's
// request limit. Persona: another elector-role user with a short name ("i"). Route: its acquisition at
// epoch 2 sends a "pad" managedFields entry, and its renewals (term writes too: the Lease webhook never sees
// them) grow that entry until the next byte would pass etcd's limit; it then releases. Invariant I2 (the
// holder's acquisition, fence-on-acquire's first step, must not fail for what a non-holder wrote): the
// holder, whose user and identity are longer, must acquire at epoch 3.
// Observed (d650cf8): HELD. The intruder's renewals grew its pad entry to 101,462 annotations, until the
// request itself passed the apiserver's limit ("Request entity too large: limit is 3145728"); but the stored
// Lease was then 469 bytes: past etcd's limit the apiserver retries an update without managedFields, which
// drops the padding. The holder's acquisition at epoch 3 was admitted.
func TestRound12PaddedAcquisitionLocksTheLeaseOut(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	waitForLeaseWebhook(t)
	ns := env.Namespace(t)
	holder, intruder := newWorker(t, ns, "app-operator-with-a-rather-long-identity"), newWorker(t, ns, "i")
	holder.Release(t, holder.Acquire(t, ns, "l", 1))
	key := types.NamespacedName{Namespace: ns, Name: "l"}
	write := func(pad int, change func(l *coordinationv1.Lease)) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var l coordinationv1.Lease
			if err := intruder.Client.Get(ctx, key, &l); err != nil {
				return err
			}
			change(&l)
			now := metav1.Now()
			entries := l.ManagedFields[:0:0]
			for _, e := range l.ManagedFields {
				if e.Manager != "pad" {
					entries = append(entries, e)
				}
			}
			entries = append(entries, metav1.ManagedFieldsEntry{Manager: "pad", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "coordination.k8s.io/v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(round11PadLeaseEntry(pad))})
			l.ManagedFields = entries
			return intruder.Client.Update(ctx, &l, testenv.Presenting(2))
		})
	}
	n := 40000
	if err := write(n, func(l *coordinationv1.Lease) {
		testenv.AcquiredBy(l, intruder.User, intruder.Holder, 2, 15*time.Second)
	}); err != nil {
		t.Fatalf("the intruder's padded acquisition: %v", round9Short(err))
	}
	var lastErr error
	for _, step := range []int{4000, 1000, 100, 10, 1} {
		for {
			err := write(n+step, func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()} })
			if err != nil {
				lastErr = err
				break
			}
			n += step
		}
	}
	size := len(mustJSON(t, env.ReadLease(t, ns, "l")))
	t.Logf("the intruder's renewals grew its pad entry to %d annotations; the Lease is %d bytes; the next byte: %v", n, size, round9Short(lastErr))
	tok2 := elector.Token{Epoch: 2, Lease: key, Holder: intruder.Holder}
	relErr := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordinationv1.Lease
		if err := intruder.Client.Get(ctx, key, &l); err != nil {
			return err
		}
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = ptr.To(""), ptr.To(int32(1)), &metav1.MicroTime{Time: time.Now()}
		return intruder.Client.Update(ctx, &l, testenv.Presenting(tok2.Epoch))
	})
	if relErr != nil {
		t.Logf("the intruder's release: %v; waiting for its lease to expire", round9Short(relErr))
		time.Sleep(16 * time.Second)
	}
	acqErr := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordinationv1.Lease
		if err := holder.Client.Get(ctx, key, &l); err != nil {
			return err
		}
		testenv.AcquiredBy(&l, holder.User, holder.Holder, 3, 15*time.Second)
		return holder.Client.Update(ctx, &l, testenv.Presenting(3))
	})
	t.Logf("the holder's acquisition at epoch 3: %v", round9Short(acqErr))
	if acqErr != nil {
		t.Errorf("another elector-role user's padded term left the fenced Lease (%d bytes) unable to take the holder's acquisition (I2): %v", size, round9Short(acqErr))
	}
}

// TestRound12EmptyDataMakesADeclarationWritten: persona: a namespace editor with create, update and patch
// on FencedResources (no token). Routes: a create of a declaration carrying spec.data {} (an empty object,
// which the rule's changedPaths would count as absent, while pkg/fencing's emptyData counts it as data:
// "written"); a JSON merge patch, a JSON patch and a server-side apply setting spec.data {} on a plain
// declaration. Invariant I3 (the work of an acquisition does not grow with what non-holders create): a
// declaration is raised within the budget in spec.raisedEpoch; one that holds data is raised in spec.epoch
// and from then on listed and raised in full by every acquisition. Every such write must be refused, and
// after two acquisitions with fence-on-acquire none of the editor's declarations may hold a spec.epoch.
// Observed (d650cf8): HELD. The create, the merge patch, the JSON patch and the apply of spec.data {}
// were each refused ("this write changes spec.data but presents no fencing token"): the webhook keeps a
// FencedResource's data as raw JSON, so {} is not absent. After two acquisitions e-merge, e-json and
// e-apply held spec.epoch 0, raisedEpoch 2, no data.
func TestRound12EmptyDataMakesADeclarationWritten(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "w1")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences = protocol.Fences{FencedResources: true}
	grantFencedResources(t, ns, holder.User)
	env.Grant(t, ns, "fr-creator", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedresources"},
		Verbs: []string{"get", "list", "create", "update", "patch"}}}, "editor")
	editor := env.ClientAs(t, "editor")
	empty := &runtime.RawExtension{Raw: []byte(`{}`)}
	var attempts []string
	var admitted []string
	try := func(name string, write func() error) {
		err := retryRBAC(t, name, write)
		attempts = append(attempts, fmt.Sprintf("%s: %s", name, round9Short(err)))
		if err == nil {
			admitted = append(admitted, name)
		}
	}
	try("create e-create with data {}", func() error {
		return editor.Create(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "e-create"},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: appLease, Data: empty}})
	})
	for _, n := range []string{"e-merge", "e-json", "e-apply"} {
		if err := retryRBAC(t, "declaring "+n, func() error {
			return editor.Create(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n},
				Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: appLease}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	frOf := func(n string) *fencingv1alpha1.FencedResource {
		return &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
	}
	try("merge patch e-merge spec.data {}", func() error {
		return editor.Patch(ctx, frOf("e-merge"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"data":{}}}`)))
	})
	try("JSON patch e-json add /spec/data {}", func() error {
		return editor.Patch(ctx, frOf("e-json"), client.RawPatch(types.JSONPatchType, []byte(`[{"op":"add","path":"/spec/data","value":{}}]`)))
	})
	try("apply e-apply spec.data {}", func() error {
		return editor.Patch(ctx, frOf("e-apply"), client.RawPatch(types.ApplyPatchType,
			fmt.Appendf(nil, `{"apiVersion":"fencing.fencekit.io/v1alpha1","kind":"FencedResource","metadata":{"name":"e-apply","namespace":%q},"spec":{"leaseName":%q,"data":{}}}`, ns, appLease)),
			client.FieldOwner("editor"), client.ForceOwnership)
	})
	for _, a := range attempts {
		t.Log(a)
	}
	for epoch := int64(1); epoch <= 2; epoch++ {
		tok := holder.Acquire(t, ns, appLease, epoch)
		if took, err := round9Fence(t, holder, tok, 10*time.Second); err != nil {
			t.Errorf("fence-on-acquire at epoch %d: %v (%v)", epoch, err, took)
		}
	}
	for _, n := range []string{"e-create", "e-merge", "e-json", "e-apply"} {
		var fr fencingv1alpha1.FencedResource
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: n}, &fr); err != nil {
			continue
		}
		data := "none"
		if fr.Spec.Data != nil {
			data = string(fr.Spec.Data.Raw)
		}
		t.Logf("%s after two acquisitions: spec.epoch %d, raisedEpoch %d, data %s", n, fr.Spec.Epoch, fr.Spec.RaisedEpoch, data)
		if fr.Spec.Epoch != 0 {
			t.Errorf("the editor's declaration %s is raised in spec.epoch (%d): every acquisition now lists and raises it in full (I3)", n, fr.Spec.Epoch)
		}
	}
	if len(admitted) > 0 {
		t.Errorf("tokenless writes giving a declaration data admitted: %v", admitted)
	}
}
