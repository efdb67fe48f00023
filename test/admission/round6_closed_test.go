package admission_test

// Round 6 of the independent attacker: the attacks that worked against 10cdab7, each closed since. Each
// test asserts the invariant it tried to break (it fails when the attack works).

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/jsonmergepatch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round6Short is err's message cut to its first 300 bytes (a fence's error joins one per object).
func round6Short(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// TestRound6DeclarationsBecomeHolderWritten: attack on I3 (acquisition), by a user with create RBAC on
// FencedResources only. Declaring is free at any time, and fence-on-acquire raises declarations only
// within a budget (half of PostAcquireTimeout) so that their number cannot stop an acquisition. A
// declaration that a budget raised holds spec.epoch != 0; when FenceOnAcquire took that for "a holder
// wrote it", every later acquisition raised it without a budget, and the declarations a non-holder
// creates migrated, acquisition by acquisition, into "every one, or no leadership" (up to 800 raised
// without a budget; with 150 more before each acquisition, acquisitions failed from epoch 6 on). A
// resource a holder wrote holds data, which only a write with the token sets: those are raised in full,
// the rest within the budget, and the webhook's copy never decides a write to a resource without data.
// The holder never writes any of them. The declarer declares 800; the holder acquires the Lease at epochs
// 1..10, each time running FenceOnAcquire with a fixed PostAcquireTimeout (3 s); every acquisition must succeed (the
// Lease still leads, I3), and the count the fence must raise in full must not grow with the declarations.
func TestRound6DeclarationsBecomeHolderWritten(t *testing.T) {
	round6Migration(t, 800, nil, 3*time.Second, 10, 0)
}

// TestRound6DeclarationsTrickleIntoHolderWritten: the same attack with the declarations trickled in, 150
// before each acquisition, so that each budget lists few and raises them all: what every later acquisition
// must raise without a budget grows by 150 per acquisition (PostAcquireTimeout 3 s).
func TestRound6DeclarationsTrickleIntoHolderWritten(t *testing.T) {
	round6Migration(t, 0, nil, 3*time.Second, 14, 150)
}

// TestRound6FatDeclarationsBecomeHolderWritten: the same attack at the elector's default
// PostAcquireTimeout (RenewDeadline, 10 s), with 400 declarations each carrying a 56 KiB annotation (free
// on a FencedResource, within the 64 KiB bound on what writes without the token add): once raised by a
// budget, a fat declaration is listed and raised by every later acquisition without a budget.
func TestRound6FatDeclarationsBecomeHolderWritten(t *testing.T) {
	round6Migration(t, 400, map[string]string{"example.com/pad": strings.Repeat("x", 56*1024)}, elector.DefaultRenewDeadline, 6, 0)
}

// round6Migration declares n FencedResources (annotations ann) as a non-holder, then acquires the Lease
// acquisitions times, each running FenceOnAcquire within timeout after declaring trickle more, and fails
// for every acquisition that fails and if any declaration was raised as holder-written.
func round6Migration(t *testing.T, n int, ann map[string]string, timeout time.Duration, acquisitions int64, trickle int) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "busy"
	holder := newWorker(t, ns, "app-operator")
	holder.Fences = protocol.Fences{FencedResources: true}
	env.Grant(t, ns, "fr-writer", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources"}, Verbs: []string{"get", "list", "watch", "patch", "update"}}}, holder.User)
	declarer := round6Declarer(t, ns)
	fence, err := fencing.FenceOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	written := func() int {
		var list fencingv1alpha1.FencedResourceList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		w := 0
		for _, fr := range list.Items {
			if fr.Spec.Epoch != 0 && fr.Spec.Data != nil {
				w++
			}
		}
		return w
	}
	if n > 0 {
		round6Declare(t, declarer, ns, lease, "d", n, ann)
	}
	failures, most := 0, 0
	for epoch := int64(1); epoch <= acquisitions && failures < 3; epoch++ {
		if trickle > 0 && failures == 0 {
			round6Declare(t, declarer, ns, lease, fmt.Sprintf("t%02d", epoch), trickle, ann)
			n += trickle
		}
		before := written()
		most = max(most, before)
		tok := holder.Acquire(t, ns, lease, epoch)
		rctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := fence.Raise(rctx, tok)
		took := time.Since(start)
		cancel()
		after := written()
		t.Logf("acquisition at epoch %d (PostAcquireTimeout %s): %d of %d declarations counted as holder-written (raised without a budget) before, %d after; the fence took %s: %v",
			epoch, timeout, before, n, after, took.Round(time.Millisecond), round6Short(err))
		if err != nil {
			failures++
			t.Errorf("acquisition at epoch %d failed with %d non-holder declarations, %d of them raised by earlier fences and now counted as holder-written (I3: the Lease must still lead): %v",
				epoch, n, before, round6Short(err))
		}
	}
	if most > 0 {
		t.Errorf("up to %d of the %d declarations a non-holder created were raised without a budget (as holder-written) by an acquisition; the holder wrote none of them (I3: the work of an acquisition grows with what non-holders create)", most, n)
	}
}

// TestRound6DryRunArmsARealHold: attack on "a dry run changes nothing" and on the cluster's controllers'
// normal writes, by a user with RBAC on the objects only. The holder validates a change with a dry-run
// Update through NewClient (kubectl --dry-run=server style), from a copy read before the user added a free
// finalizer. The dry run loses its compare-and-swap; NewClient's holdOnConflict then writes the hold for
// real (the patch carries no dry-run option). Afterwards the stored object must not carry a hold, and the
// Deployment controller's status write must be admitted. The same with a dry-run Delete through NewClient
// (its deletion marker).
func TestRound6DryRunArmsARealHold(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	hc, read := deploymentHolder(t, testenv.Deployment(ns, "app"), "editor", admission.DeploymentControllerUser)
	stale := read()
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/x"]}}`)))
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	before := read().ResourceVersion
	stale.Spec.Replicas = ptr.To(int32(5))
	err := hc.Update(ctx, stale, client.DryRunAll)
	after := read()
	t.Logf("the holder's dry-run Update from a stale copy: %v; resourceVersion %s -> %s, annotations %v", err, before, after.ResourceVersion, after.Annotations)
	if _, held := after.Annotations[fencingv1alpha1.HoldAtEpochAnnotation]; held || after.ResourceVersion != before {
		t.Errorf("a dry-run Update changed the stored Deployment: resourceVersion %s -> %s, annotations %v", before, after.ResourceVersion, after.Annotations)
	}
	d := read()
	d.Status.ObservedGeneration = d.Generation
	serr := retryRBAC(t, "the Deployment controller's status", func() error {
		return env.ClientAs(t, admission.DeploymentControllerUser).Status().Update(ctx, d)
	})
	t.Logf("the Deployment controller's status update after the holder's dry run: %v", serr)
	if serr != nil {
		t.Errorf("the Deployment controller's status update after the holder's dry run: %v", serr)
	}

	// The same for a dry-run delete (kubectl delete --dry-run=server through NewClient): the marker write
	// goes out for real, the DELETE as a dry run, and a DELETE that succeeded is not disarmed.
	if err := hc.Update(ctx, read()); err != nil { // the holder writes: the hold goes
		t.Fatalf("the holder's update: %v", err)
	}
	before = read().ResourceVersion
	err = hc.Delete(ctx, read(), client.DryRunAll)
	after = read()
	t.Logf("the holder's dry-run Delete: %v; resourceVersion %s -> %s, annotations %v, deletionTimestamp %v", err, before, after.ResourceVersion, after.Annotations, after.DeletionTimestamp)
	if _, armed := after.Annotations[fencingv1alpha1.DeleteAtEpochAnnotation]; armed || after.ResourceVersion != before {
		t.Errorf("a dry-run Delete changed the stored Deployment: resourceVersion %s -> %s, annotations %v", before, after.ResourceVersion, after.Annotations)
	}
	d = read()
	d.Status.ObservedGeneration = d.Generation
	d.Status.Replicas = 7
	serr = env.ClientAs(t, admission.DeploymentControllerUser).Status().Update(ctx, d)
	t.Logf("the Deployment controller's status update after the holder's dry-run delete: %v", serr)
	if serr != nil {
		t.Errorf("the Deployment controller's status update after the holder's dry-run delete: %v", serr)
	}
}

// TestRound6GitOpsLabelMakesTheHoldersApplyConflict: attack on I2, by a GitOps tool (server-side apply
// with its own field manager) without the token. A FencedResource's labels are free: the tool applies
// label team=platform. The holder then applies its FencedResource through NewClient's Patch with
// client.Apply (NewClient.Apply forces ownership, Patch does not add it), with label team=orders. The
// apiserver answers a field-manager conflict with 409, which NewClient's holdOnConflict takes for a lost
// compare-and-swap: it arms the hold, which no retry of the same apply will clear. The holder's apply must
// succeed, or at least leave no hold behind.
func TestRound6GitOpsLabelMakesTheHoldersApplyConflict(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "gitops")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "orders", "l")
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	apply := func(c client.Client, labels map[string]any, spec map[string]any, opts ...client.PatchOption) error {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
			"metadata": map[string]any{"namespace": ns, "name": key.Name, "labels": labels}}}
		if spec != nil {
			u.Object["spec"] = spec
		}
		return c.Patch(ctx, u, client.Apply, opts...) //nolint:staticcheck // the attack is on Patch with client.Apply, which NewClient does not force
	}
	if err := retryRBAC(t, "the GitOps tool's apply", func() error {
		return apply(env.ClientAs(t, "gitops"), map[string]any{"team": "platform"}, nil, client.FieldOwner("gitops"))
	}); err != nil {
		t.Fatalf("the GitOps tool's apply of a label: %v", err)
	}
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	// Labels only: the apply owns no data the holder's Writer wrote (an Update entry of the same manager).
	err := apply(fenced, map[string]any{"team": "orders"}, nil)
	got := get(t, key)
	t.Logf("the holder's apply through NewClient.Patch(client.Apply): %v; labels %v, annotations %v", round6Short(err), got.Labels, got.Annotations)
	if err != nil {
		t.Errorf("the holder's server-side apply failed after a GitOps tool's free label (I2): %v", round6Short(err))
	}
	if _, held := got.Annotations[fencingv1alpha1.HoldAtEpochAnnotation]; held {
		t.Errorf("the holder's apply conflict (field managers, not a resourceVersion) left the hold armed: every write without the token is refused until the holder writes again")
	}
}

// TestRound6TimedOutDeleteLeavesTheMarkerArmed: attack on I2 and the cluster's controllers' writes,
// needing only a slow DELETE. NewClient.Delete writes the marker, then DELETEs; if the DELETE fails it
// removes the marker "best effort", with the same context. A DELETE that fails because that context ended
// (a slow apiserver, a partition: here the holder's transport holds DELETEs until the context ends) leaves
// the disarm with an ended context too: the marker stays armed at the current epoch, and every write without
// the token to the object is refused until the holder writes it again. After the failed delete, a free
// write (a user's finalizer) must be admitted.
func TestRound6TimedOutDeleteLeavesTheMarkerArmed(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	env.Grant(t, ns, "cm-delete", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"delete"}}}, holder.User)
	if err := retryRBAC(t, "the holder's create", func() error {
		return fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(holder.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodDelete {
				<-req.Context().Done() // the DELETE does not come back in time
				return nil, req.Context().Err()
			}
			return rt.RoundTrip(req)
		})
	}
	slow, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err = fencing.NewClient(slow, tokenOf(tok)).Delete(dctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}})
	cancel()
	t.Logf("the holder's Delete whose DELETE timed out: %v; annotations now %v", err, readConfigMap(t, ns, "cm").Annotations)
	ferr := patchConfigMap(t, env.ClientAs(t, "editor"), ns, "cm", `{"metadata":{"finalizers":["example.com/x"]}}`)
	t.Logf("a user's finalizer after the failed delete: %v", ferr)
	if ferr == nil {
		_ = patchConfigMap(t, env.Client, ns, "cm", `{"metadata":{"finalizers":null}}`)
	} else {
		t.Errorf("after the holder's delete failed, its marker still holds the object: a free write is refused (I2; the cluster's controllers are refused the same way): %v", ferr)
	}
}

// TestRound6StaleMarkerDisarmsTheHold: attack on I2 (headroom), by a stale holder and a user with RBAC on
// labels only. held() reads the deletion marker first and the hold only if there is no marker; a marker
// of a past epoch then decides that the object is not held, whatever the hold says. A FencedResource keeps
// such a marker across takeovers: replica-1 (epoch 1) wrote its marker for a Writer.Delete and paused
// before the DELETE; fence-on-acquire's raise of a FencedResource (epochPatch: epoch, writer, hold) does
// not remove the marker, nor does Writer.Update's hold. replica-2 acquires at epoch 2 and fences, then arms
// its hold on the resource (as Writer.Update does after losing a compare-and-swap): a relabel without the
// token must be refused, as it is on a control resource without the stale marker. Then, logged only (a
// race): replica-2's Writer.Update under a relabel storm, with and without client-go's default limiter.
func TestRound6StaleMarkerDisarmsTheHold(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	r1 := newWorker(t, ns, "replica-1")
	r2 := newWorker(t, ns, "replica-2")
	r2.LeaseDuration = 10 * time.Minute
	r1.Fences = protocol.Fences{FencedResources: true}
	r2.Fences = protocol.Fences{FencedResources: true}
	grantFencedResources(t, ns, r1.User, r2.User, "relabeller")
	tok1 := r1.Acquire(t, ns, "l", 1)
	control, target, target2 := declare(t, ns, "control", "l"), declare(t, ns, "target", "l"), declare(t, ns, "target-unthrottled", "l")
	for _, key := range []types.NamespacedName{control, target, target2} {
		if _, err := retryRBACValue(t, "replica-1's write", func() (*fencingv1alpha1.FencedResource, error) {
			return fencing.NewWriter(r1.Client).Set(ctx, tok1, key, map[string]any{"v": 1})
		}); err != nil {
			t.Fatal(err)
		}
	}
	// replica-1's Writer.Delete of the targets, first step: the marker at its epoch; it pauses before the DELETE.
	for _, key := range []types.NamespacedName{target, target2} {
		if err := mergePatch(t, r1.Client, key, `{"metadata":{"annotations":{"fencing.fencekit.io/delete-at-epoch":"1"}}}`, testenv.Presenting(1)); err != nil {
			t.Fatal(err)
		}
	}
	tok2 := r2.Acquire(t, ns, "l", 2)
	fence, err := fencing.FenceOnAcquireForConfig(r2.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Raise(ctx, tok2); err != nil {
		t.Fatalf("replica-2's fence-on-acquire: %v", err)
	}
	t.Logf("target after replica-2's fence: epoch %d, annotations %v", get(t, target).Spec.Epoch, get(t, target).Annotations)
	relabeller := unthrottled(t, "relabeller")
	// The invariant itself, deterministically: with replica-2's hold armed (as Writer.Update arms it after
	// losing a compare-and-swap), a write without the token must wait.
	for _, key := range []types.NamespacedName{control, target} {
		if err := mergePatch(t, r2.Client, key, `{"metadata":{"annotations":{"fencing.fencekit.io/hold-at-epoch":"2"}}}`, testenv.Presenting(2)); err != nil {
			t.Fatalf("replica-2 arms its hold on %s: %v", key.Name, err)
		}
		rv := get(t, key).ResourceVersion
		err := retryRBAC(t, "the relabel", func() error { return mergePatch(t, relabeller, key, `{"metadata":{"labels":{"x":"1"}}}`) })
		t.Logf("%s with replica-2's hold armed (annotations %v): a relabel without the token: %v", key.Name, get(t, key).Annotations, err)
		if err == nil {
			t.Errorf("%s: a relabel without the token was admitted while the holder's hold (hold-at-epoch=2, the Lease's epoch) was armed, resourceVersion %s -> %s (I2)", key.Name, rv, get(t, key).ResourceVersion)
		}
		if err := mergePatch(t, r2.Client, key, `{"metadata":{"annotations":{"fencing.fencekit.io/hold-at-epoch":null}}}`, testenv.Presenting(2)); err != nil {
			t.Fatal(err)
		}
	}
	// The consequence, under a storm (a race: logged, not asserted; see the report).
	for _, c := range []struct {
		key     types.NamespacedName
		holder  client.Client
		limited string
	}{
		{control, limited(t, r2), "client-go's default limiter (5 QPS, burst 10)"},
		{target, limited(t, r2), "client-go's default limiter (5 QPS, burst 10)"},
		{target2, unthrottled(t, r2.User), "no client-side limiter"},
	} {
		key := c.key
		admitted, stop := stormAtLeast(t, 2, 20, func(ctx context.Context, g, i int) error {
			return relabeller.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
				client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"g%d":"%d"}}}`, g, i))))
		})
		before := admitted.Load()
		uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		_, err := fencing.NewWriter(c.holder).Update(uctx, tok2, key, func(d map[string]any) error { d["v"] = 2; return nil })
		took := time.Since(start)
		cancel()
		during := admitted.Load() - before
		stop()
		t.Logf("%s (holder's client: %s): replica-2's Writer.Update under a relabel storm took %s, %d relabels admitted meanwhile: %v; annotations now %v",
			key.Name, c.limited, took.Round(time.Millisecond), during, round6Short(err), get(t, key).Annotations)
	}
}

// TestRound6LastAppliedIsOwnership: attack on I1 (ownership: what decides what the holder's apply
// prunes), by a user with RBAC on FencedResources only. For server-side apply that is managedFields, which
// the rule fences; for client-side apply (kubectl apply, a JSON merge patch computed three ways) it is the
// annotation kubectl.kubernetes.io/last-applied-configuration, which is free on a FencedResource (any
// annotation but fencing.fencekit.io/*). The holder's data holds a (its apply's) and b (written by its
// controller through Writer). The user adds b to the holder's last-applied configuration. The holder then
// applies a=2, as kubectl does (original = the stored last-applied, modified = its config, current = the
// object), with its token. Its apply must not delete b, which its last apply never set. Twice: after an
// apply of its own, and as its first kubectl apply of a resource Writer wrote.
func TestRound6LastAppliedIsOwnership(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "editor")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "orders", "l")
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"a": 1, "b": 1})
	}); err != nil {
		t.Fatal(err)
	}
	const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"
	config := func(data map[string]any) map[string]any {
		return map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
			"metadata": map[string]any{"name": key.Name, "namespace": ns, "annotations": map[string]any{fencingv1alpha1.WriterAnnotation: holder.Holder}},
			"spec":     map[string]any{"leaseName": "l", "epoch": 1, "data": data}}
	}
	withLastApplied := func(c map[string]any) []byte {
		raw := mustJSON(t, c)
		out := config(c["spec"].(map[string]any)["data"].(map[string]any))
		out["metadata"].(map[string]any)["annotations"].(map[string]any)[lastApplied] = string(raw) + "\n"
		return mustJSON(t, out)
	}
	kubectlApply := func(c map[string]any) error {
		var current fencingv1alpha1.FencedResource
		if err := holder.Client.Get(ctx, key, &current); err != nil {
			return err
		}
		currentRaw := mustJSON(t, current)
		patch, err := jsonmergepatch.CreateThreeWayJSONMergePatch([]byte(current.Annotations[lastApplied]), withLastApplied(c), currentRaw)
		if err != nil {
			return err
		}
		t.Logf("the holder's apply sends %s", patch)
		return holder.Client.Patch(ctx, &current, client.RawPatch(types.MergePatchType, patch), testenv.Presenting(1))
	}
	// Variant 1: the holder applied before (its entry owns the annotation). Variant 2: its first
	// kubectl apply of the resource (declared by someone else, written by Writer: no annotation yet).
	for _, first := range []bool{true, false} {
		if !first {
			key = declare(t, ns, "orders-2", "l")
			if _, err := fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"a": 1, "b": 1}); err != nil {
				t.Fatal(err)
			}
		}
		if first {
			// The holder's first apply: it sets a only (b is its controller's, written through Writer).
			if err := kubectlApply(config(map[string]any{"a": 1})); err != nil {
				t.Fatalf("the holder's first apply: %v", err)
			}
		}
		// The user, without the token, writes the holder's last-applied configuration to claim b.
		claimed := string(mustJSON(t, config(map[string]any{"a": 1, "b": 1})))
		err := retryRBAC(t, "the editor's annotation", func() error {
			return mergePatch(t, env.ClientAs(t, "editor"), key, string(mustJSON(t, map[string]any{"metadata": map[string]any{"annotations": map[string]any{lastApplied: claimed}}})))
		})
		t.Logf("%s (holder applied before: %v): the editor, without the token, writes %s to claim data.b: %v", key.Name, first, lastApplied, round6Short(err))
		if err := kubectlApply(config(map[string]any{"a": 2})); err != nil {
			t.Fatalf("the holder's apply: %v", err)
		}
		d := data(t, get(t, key))
		t.Logf("%s: data after the holder's apply of a=2: %v", key.Name, d)
		if _, kept := d["b"]; !kept {
			t.Errorf("%s: the holder's client-side apply of a=2 deleted data.b, which no apply of the holder ever set: a user without the token wrote %s (I1 ownership)", key.Name, lastApplied)
		}
	}
}

// TestRound6CronJobControllerRefusedWithoutWarning: attack on "nothing locks the cluster's own
// controllers out of their normal writes" (or, where the design accepts it, says so: a warning and
// ControllersRefused=True). A policy declares batch/jobs, which cluster-controllers.md lists as "job
// controller (status), ttl-after-finished-controller (delete): status free". The CronJob controller
// (kube-system:cronjob-controller) creates a Job for its CronJob and deletes old ones (history limits).
// The test makes both requests as that ServiceAccount; if either is refused, the policy must carry
// ControllersRefused=True naming it.
func TestRound6CronJobControllerRefusedWithoutWarning(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const cronjobs = "system:serviceaccount:kube-system:cronjob-controller"
	env.Grant(t, ns, "jobs", []rbacv1.PolicyRule{{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: []string{"*"}}}, cronjobs)
	job := func(name string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	}
	// An old Job of the CronJob, from before the policy; the controller deletes it past the history limit.
	if err := env.Client.Create(ctx, job("nightly-28000000")); err != nil {
		t.Fatal(err)
	}
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Group: "batch", Resource: "jobs"}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	newWorker(t, ns, "app-operator").Acquire(t, ns, appLease, 1)
	testenv.Eventually(t, "the webhook enforces the policy", func() (bool, string) {
		err := env.Client.Create(ctx, job("probe"), client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	c := env.ClientAs(t, cronjobs)
	createErr := retryRBAC(t, "the CronJob controller's Job", func() error { return c.Create(ctx, job("nightly-29000000")) })
	t.Logf("the CronJob controller creates a Job: %v", createErr)
	deleteErr := c.Delete(ctx, job("nightly-28000000"), client.PropagationPolicy(metav1.DeletePropagationBackground))
	t.Logf("the CronJob controller deletes an old Job (the Lease held): %v", deleteErr)
	cond := round6ControllersRefused(t, client.ObjectKeyFromObject(p))
	t.Logf("FencingPolicy %s/app: ControllersRefused %v", ns, cond)
	if (createErr != nil || deleteErr != nil) && (cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "cronjob")) {
		t.Errorf("the CronJob controller's Job create (%v) and delete (%v) are refused but FencingPolicy app does not say so (ControllersRefused %v)", round6Short(createErr), round6Short(deleteErr), cond)
	}
}

// TestRound6ResourceClaimControllerRefusedWithoutWarning: the CronJob case for resource.k8s.io
// ResourceClaims: the resource-claim-controller (a kube-controller-manager ServiceAccount) creates the
// claims of Pods that use resourceClaimTemplates. A policy declaring resourceclaims must say so
// (ControllersRefused=True) if that create is refused.
func TestRound6ResourceClaimControllerRefusedWithoutWarning(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const rcc = "system:serviceaccount:kube-system:resource-claim-controller"
	env.Grant(t, ns, "claims", []rbacv1.PolicyRule{{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"*"}}}, rcc)
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Group: "resource.k8s.io", Resource: "resourceclaims"}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Skipf("resource.k8s.io/resourceclaims cannot be declared here: %v", err)
	}
	claim := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec": map[string]any{"devices": map[string]any{"requests": []any{map[string]any{"name": "gpu",
				"exactly": map[string]any{"deviceClassName": "example.com"}}}}}}}
	}
	testenv.Eventually(t, "the webhook enforces the policy", func() (bool, string) {
		err := env.Client.Create(ctx, claim("probe"), client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	err := retryRBAC(t, "the claim controller's create", func() error { return env.ClientAs(t, rcc).Create(ctx, claim("pod-gpu-abc12")) })
	t.Logf("the resource-claim-controller creates a Pod's ResourceClaim: %v", round6Short(err))
	cond := round6ControllersRefused(t, client.ObjectKeyFromObject(p))
	t.Logf("ControllersRefused: %v", cond)
	if err != nil && (cond == nil || cond.Status != metav1.ConditionTrue) {
		t.Errorf("the resource-claim-controller's create is refused (%v) but FencingPolicy app does not say so (ControllersRefused %v)", round6Short(err), cond)
	}
}

// round6ControllersRefused waits until the operator has reported the policy's ControllersRefused
// condition for its current generation, and returns it.
func round6ControllersRefused(t *testing.T, key types.NamespacedName) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	testenv.Eventually(t, "the policy's ControllersRefused condition", func() (bool, string) {
		var got fencingv1alpha1.FencingPolicy
		if err := env.Client.Get(t.Context(), key, &got); err != nil {
			return false, err.Error()
		}
		cond = meta.FindStatusCondition(got.Status.Conditions, fencingv1alpha1.ConditionControllersRefused)
		return cond != nil && cond.ObservedGeneration == got.Generation, fmt.Sprint(cond)
	})
	return cond
}

// TestRound6HoldLocksOutControllerStatus: attack on "nothing a non-holder writes locks the cluster's own
// controllers out of their normal writes", by a user with RBAC on the objects only. The user adds a free
// finalizer to the holder's Deployment between the holder's read and its compare-and-swap Update through
// NewClient. The Update loses (409) and NewClient arms the hold (hold-at-epoch at the current epoch) with
// the token, so that the holder's retry wins. While the hold stands, every write without the token is
// refused; it stands until the holder's next write to that object. A holder that does not write that
// object again (its retry found nothing left to do, it moved on) must not leave the Deployment controller
// locked out for as long as the Lease is live: the controller waits only MaxClusterControllerHold after
// the hold was armed (decision 0045), so its status update, retried as the controller requeues it, is
// admitted then.
func TestRound6HoldLocksOutControllerStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	hc, read := deploymentHolder(t, testenv.Deployment(ns, "app"), "editor", admission.DeploymentControllerUser)
	stale := read()
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/x"]}}`)))
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	stale.Spec.Replicas = ptr.To(int32(2))
	err := hc.Update(ctx, stale)
	armed := time.Now()
	t.Logf("the holder's Update with the resourceVersion it read before the finalizer: %v; stored annotations %v", err, read().Annotations)
	if !apierrors.IsConflict(err) {
		t.Fatalf("want the holder's update to lose its compare-and-swap, got %v", err)
	}
	dc := env.ClientAs(t, admission.DeploymentControllerUser)
	var refused int
	var first error
	testenv.Eventually(t, "the Deployment controller's status update is admitted after the hold's time", func() (bool, string) {
		d := read()
		d.Status.ObservedGeneration = d.Generation
		d.Status.Replicas = 1
		err := dc.Status().Update(ctx, d)
		if err != nil && !isForbiddenByRBAC(err) {
			refused++
			if first == nil {
				first = err
			}
		}
		return err == nil, testenv.ErrString(err)
	})
	t.Logf("the Deployment controller's status update admitted %s after the hold was armed, %d refusals before (first: %v)",
		time.Since(armed).Round(time.Millisecond), refused, first)
	if refused == 0 || !strings.Contains(first.Error(), "held for the holder's next compare-and-swap write") {
		t.Errorf("the Deployment controller's status update right after the hold was armed was not held: %v", first)
	}
}

// TestRound6FinalizerRemovalUnderAStormDuringDeletion: attack on I2 (headroom), by a user with RBAC on
// labels only. held() holds nothing on an object being deleted, but a FencedResource's labels stay free
// while it is being deleted (finalizers can no longer be added, labels can). The holder deleted its
// FencedResource, which its own finalizer (its cleanup) keeps; it now removes that finalizer with
// NewClient's compare-and-swap Update (read, remove, update; again on a conflict, which arms the hold), for
// up to 5 s, while a user relabels the resource from two goroutines (logged: a race, won or lost by the
// holder's request rate). Asserted: with the holder's hold armed, as NewClient arms it after a lost
// compare-and-swap, a relabel without the token must wait (I2: the holder's next write of any kind).
func TestRound6FinalizerRemovalUnderAStormDuringDeletion(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "relabeller")
	tok := holder.Acquire(t, ns, "l", 1)
	w := fencing.NewWriter(holder.Client)
	relabeller := unthrottled(t, "relabeller")
	removeFinalizer := func(hc client.Client, key types.NamespacedName) (time.Duration, int, error) {
		fenced := fencing.NewClient(hc, tokenOf(tok))
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start, tries := time.Now(), 0
		for {
			tries++
			var fr fencingv1alpha1.FencedResource
			err := hc.Get(rctx, key, &fr)
			if err == nil {
				fr.Finalizers = nil
				err = fenced.Update(rctx, &fr)
			}
			if err == nil || !apierrors.IsConflict(err) || rctx.Err() != nil {
				return time.Since(start), tries, err
			}
		}
	}
	for _, c := range []struct {
		name    string
		storm   bool
		holder  client.Client
		limited string
	}{
		{"control", false, limited(t, holder), "client-go's default limiter (5 QPS, burst 10)"},
		{"target", true, limited(t, holder), "client-go's default limiter (5 QPS, burst 10)"},
		{"target-unthrottled", true, unthrottled(t, holder.User), "no client-side limiter"},
	} {
		name := c.name
		key := declare(t, ns, name, "l")
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
		var stop func()
		admitted := &atomic.Int64{}
		if c.storm {
			admitted, stop = stormAtLeast(t, 2, 20, func(ctx context.Context, g, i int) error {
				return relabeller.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
					client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"g%d":"%d"}}}`, g, i))))
			})
		}
		before := admitted.Load()
		took, tries, err := removeFinalizer(c.holder, key)
		during := admitted.Load() - before
		if stop != nil {
			stop()
		}
		t.Logf("%s (being deleted; the holder's client has %s): the holder's removal of its finalizer took %s and %d tries, %d relabels admitted meanwhile: %v",
			name, c.limited, took.Round(time.Millisecond), tries, during, round6Short(err))
	}
	// The invariant itself, deterministically: the holder's hold armed on its FencedResource being deleted
	// (as NewClient arms it after losing a compare-and-swap), a relabel without the token must wait.
	key := declare(t, ns, "held", "l")
	if _, err := w.Set(ctx, tok, key, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	if err := mergePatch(t, holder.Client, key, `{"metadata":{"finalizers":["example.com/cleanup"]}}`, testenv.Presenting(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Delete(ctx, tok, key); err != nil {
		t.Fatal(err)
	}
	if err := mergePatch(t, holder.Client, key, `{"metadata":{"annotations":{"fencing.fencekit.io/hold-at-epoch":"1"}}}`, testenv.Presenting(1)); err != nil {
		t.Fatalf("the holder arms its hold on its FencedResource being deleted: %v", err)
	}
	err := mergePatch(t, relabeller, key, `{"metadata":{"labels":{"x":"1"}}}`)
	t.Logf("held (being deleted, annotations %v): a relabel without the token: %v", get(t, key).Annotations, err)
	if err == nil {
		t.Errorf("a relabel without the token was admitted on the holder's FencedResource being deleted while its hold (the Lease's epoch) was armed: the holder's compare-and-swap removal of its finalizer can be starved (I2)")
	}
	_ = mergePatch(t, holder.Client, key, `{"metadata":{"finalizers":null}}`, testenv.Presenting(1))
}
