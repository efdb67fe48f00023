package admission_test

// Round 4 of the independent attacker: the six attacks that worked against 79f4e45, each closed since.
// Each test asserts the invariant it tried to break (it fails when the attack works).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestRound4ScaleOfAnObjectBeingDeleted: a write with the token that changes the content of an object
// being deleted is refused, since it would go with the object when a user without the token removes its
// last finalizer ("nothing is lost"). The rule skips subresources: the holder's scale of its Deployment,
// being deleted and held by another user's free finalizer, is admitted and acknowledged (spec.replicas
// changes); the other user then removes its finalizer, and the Deployment, with the acknowledged write,
// is gone.
func TestRound4ScaleOfAnObjectBeingDeleted(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
	hc, read := deploymentHolder(t, dep, "editor")
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`)))
	}); err != nil {
		t.Fatalf("a free finalizer: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := hc.Delete(ctx, read()); err != nil {
		t.Fatalf("the holder's delete: %v", err)
	}
	if read().DeletionTimestamp == nil {
		t.Fatal("the Deployment is not being deleted")
	}
	plain := read()
	plain.Spec.Replicas = ptr.To(int32(2))
	err := hc.Update(ctx, plain)
	t.Logf("the holder's update of spec.replicas on the Deployment being deleted (control): %v", err)
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
	err = hc.SubResource("scale").Update(ctx, read(), client.WithSubResourceBody(scale))
	t.Logf("the holder's scale to 5 through deployments/scale on the Deployment being deleted: %v (spec.replicas now %d)", err, *read().Spec.Replicas)
	if err == nil {
		if err := editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
			t.Logf("the editor's removal of its finalizer: %v", err)
		}
		testenv.Eventually(t, "the Deployment is gone", func() (bool, string) {
			err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "app"}, &appsv1.Deployment{})
			return apierrors.IsNotFound(err), testenv.ErrString(err)
		})
		t.Errorf("the holder's scale write with the token to its Deployment being deleted was admitted, and went with the Deployment when a user without the token removed its finalizer (nothing is lost)")
	}
}

// round4TinyFinalizers is a merge patch setting n finalizers of 6 characters: the most list items (and
// managedFields entries) per byte the bound on metadata counts. (A covered object's annotations are not
// free; its finalizers are.)
func round4TinyFinalizers(t *testing.T, n int) string {
	fins := make([]string, n)
	for i := range n {
		fins[i] = fmt.Sprintf("x/%04d", i)
	}
	return string(mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": fins}}))
}

// round4LongFinalizers is a merge patch setting n finalizers of 317 bytes (the padding of
// TestIndependentPaddedHolderObjectsSlowTheObjectFence, whose timing allowlist.md quotes).
func round4LongFinalizers(t *testing.T, n int) string {
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4)[:252] + "x"
	fins := make([]string, n)
	for i := range fins {
		fins[i] = fmt.Sprintf("%s/%063d", prefix, i)
	}
	return string(mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": fins}}))
}

// TestRound4TinyFinalizersSlowTheObjectFence: MaxFreePartBytes bounds in bytes what a user without the
// token adds to each holder-written object, and fence-on-acquire raises every holder-written object with
// no budget, on the argument that a raise costs time in proportion to the object's size. It costs time in
// proportion to the number of fields as much (the apiserver's managedFields bookkeeping, the validation of
// each finalizer, the webhook's diff): an editor pads each of 150 holder-written ConfigMaps first as
// allowlist.md measured (95 or so finalizers of 317 bytes, the control), then with as many 6-character
// finalizers as the same 64 KiB lets in. The fence at the elector's default PostAcquireTimeout must raise
// all of them in time in both cases (I3).
func TestRound4TinyFinalizersSlowTheObjectFence(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const n = 150
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	env.Grant(t, ns, "holder-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"list"}}}, holder.User)
	fenced := fencing.NewClient(unthrottled(t, holder.User), tokenOf(tok))
	editor := unthrottled(t, "editor")
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, "probe", `{"metadata":{"finalizers":null}}`) })
	mostOf := func(what string, pad func(*testing.T, int) string, from, step int) int {
		for k := from; k > 0; k -= step {
			if err := retryRBAC(t, "the editor's padding", func() error { return patchConfigMap(t, editor, ns, "probe", pad(t, k)) }); err == nil {
				t.Logf("the bound lets in %d %s: metadata %d bytes", k, what, len(mustJSON(t, readConfigMap(t, ns, "probe").ObjectMeta)))
				_ = patchConfigMap(t, env.Client, ns, "probe", `{"metadata":{"finalizers":null}}`)
				return k
			}
		}
		t.Fatalf("no padding of %s admitted", what)
		return 0
	}
	long := round4LongFinalizers(t, mostOf("finalizers of 317 bytes", round4LongFinalizers, 120, 5))
	tiny := round4TinyFinalizers(t, mostOf("finalizers of 6 characters", round4TinyFinalizers, 2600, 50)-100) // a raise adds to the metadata
	for i := range n {
		name := fmt.Sprintf("cm-%03d", i)
		if err := fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": "1"}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := range n {
			_ = patchConfigMap(t, env.Client, ns, fmt.Sprintf("cm-%03d", i), `{"metadata":{"finalizers":null}}`)
		}
	})
	pad := func(patch string) {
		var failed atomic.Int64
		workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
			if err := patchConfigMap(t, editor, ns, fmt.Sprintf("cm-%03d", i), patch); err != nil && failed.Add(1) == 1 {
				t.Errorf("cm-%03d: %v", i, err)
			}
		})
		if failed.Load() > 0 {
			t.Fatalf("%d objects not padded", failed.Load())
		}
	}
	fc, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	fence := func(what string, epoch int64) {
		tok := holder.Acquire(t, ns, appLease, epoch)
		fctx, cancel := context.WithTimeout(ctx, elector.DefaultRenewDeadline)
		defer cancel()
		start := time.Now()
		err := fc.Raise(fctx, tok)
		took := time.Since(start)
		raised := 0
		for i := range n {
			if objectEpoch(t, ns, fmt.Sprintf("cm-%03d", i)) == fmt.Sprint(epoch) {
				raised++
			}
		}
		msg := ""
		if err != nil {
			msg = err.Error()
			if i := strings.Index(msg, "\n"); i > 0 {
				msg = msg[:i] + " ..."
			}
		}
		t.Logf("%s: the fence at epoch %d took %v; %d of %d holder-written ConfigMaps raised; error: %s", what, epoch, took, raised, n, msg)
		if err != nil || raised < n {
			t.Errorf("fence-on-acquire at the default PostAcquireTimeout (%v), %s: %d of %d holder-written objects raised (I3): %s",
				elector.DefaultRenewDeadline, what, raised, n, msg)
		}
	}
	pad(long)
	fence("padded with finalizers of 317 bytes (control)", 2)
	pad(`{"metadata":{"finalizers":null}}`)
	pad(tiny)
	fence("padded with finalizers of 6 characters", 3)
}

// TestRound4TinyLabelsSlowTheResourceFence: the same for FenceOnAcquire, which raises every FencedResource
// a holder wrote (spec.epoch above 0) with no budget. A FencedResource's labels and annotations are free
// without the token, within 64 KiB for metadata and status. An editor pads each of 150 resources the
// holder wrote first with one annotation of 56 KiB (the control: the same bytes in one field), then with
// as many empty labels of 5-character keys as the bound lets in. The fence at the elector's default
// PostAcquireTimeout must raise all of them in time in both cases (I3).
func TestRound4TinyLabelsSlowTheResourceFence(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const n, lease = 150, "l"
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.FencedResources = true
	grantFencedResources(t, ns, holder.User, "editor")
	tok := holder.Acquire(t, ns, lease, 1)
	w := fencing.NewWriter(unthrottled(t, holder.User))
	editor := unthrottled(t, "editor")
	keys := make([]types.NamespacedName, n)
	for i := range keys {
		keys[i] = declare(t, ns, fmt.Sprintf("fr-%03d", i), lease)
	}
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, keys[0], map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
		if _, err := w.Set(ctx, tok, keys[i], map[string]any{"v": i}); err != nil && failed.Add(1) == 1 {
			t.Errorf("the holder's write of %s: %v", keys[i], err)
		}
	})
	if failed.Load() > 0 {
		t.Fatalf("%d holder writes failed", failed.Load())
	}
	labels := func(k int) string {
		m := make(map[string]any, k)
		for i := range k {
			m[fmt.Sprintf("k%04d", i)] = ""
		}
		return string(mustJSON(t, map[string]any{"metadata": map[string]any{"labels": m}}))
	}
	most := 0
	for k := 3000; k > 0 && most == 0; k -= 50 {
		if err := retryRBAC(t, "the editor's labels", func() error { return mergePatch(t, editor, keys[0], labels(k)) }); err == nil {
			most = k
		}
	}
	raw := mustJSON(t, get(t, keys[0]).ObjectMeta)
	t.Logf("the bound lets in %d empty labels of 5-character keys: metadata %d bytes", most, len(raw))
	if err := mergePatch(t, editor, keys[0], `{"metadata":{"labels":null}}`); err != nil {
		t.Fatal(err)
	}
	tiny := labels(most - 100) // a raise adds to the metadata
	big := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/pad":%q}}}`, strings.Repeat("x", 56*1024))
	pad := func(patch string) {
		var failed atomic.Int64
		workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
			if err := mergePatch(t, editor, keys[i], patch); err != nil && failed.Add(1) == 1 {
				t.Errorf("%s: %v", keys[i], err)
			}
		})
		if failed.Load() > 0 {
			t.Fatalf("%d resources not padded", failed.Load())
		}
	}
	fc, err := fencing.FenceOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	fence := func(what string, epoch int64) {
		tok := holder.Acquire(t, ns, lease, epoch)
		fctx, cancel := context.WithTimeout(ctx, elector.DefaultRenewDeadline)
		defer cancel()
		start := time.Now()
		err := fc.Raise(fctx, tok)
		took := time.Since(start)
		raised := 0
		for _, k := range keys {
			if get(t, k).Spec.FencedEpoch() == epoch {
				raised++
			}
		}
		msg := ""
		if err != nil {
			msg = err.Error()
			if i := strings.Index(msg, "\n"); i > 0 {
				msg = msg[:i] + " ..."
			}
		}
		t.Logf("%s: the fence at epoch %d took %v; %d of %d holder-written FencedResources raised; error: %s", what, epoch, took, raised, n, msg)
		if err != nil || raised < n {
			t.Errorf("FenceOnAcquire at the default PostAcquireTimeout (%v), %s: %d of %d holder-written resources raised (I3): %s",
				elector.DefaultRenewDeadline, what, raised, n, msg)
		}
	}
	pad(big)
	fence("padded with one annotation of 56 KiB (control)", 2)
	pad(`{"metadata":{"annotations":{"example.com/pad":null}}}`)
	pad(tiny)
	fence("padded with empty labels of 5-character keys", 3)
}

// TestRound4HolderSizedMetadataLocksOutControllerStatus: MaxFreePartBytes counts the managedFields the
// holder's own writes leave. A holder's Deployment with 900 environment variables (well within the
// apiserver's limits) carries a managedFields entry of the holder's over 64 KiB; the Deployment
// controller's first status write (free for it, allowlist.md "status.* through the status subresource")
// grows status and is refused for the bound, so the cluster's controller can never report the holder's
// Deployment. Not one of I1 to I4: a regression of the new bound against the allowlist's entry.
func TestRound4HolderSizedMetadataLocksOutControllerStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	envs := make([]corev1.EnvVar, 900)
	for i := range envs {
		envs[i] = corev1.EnvVar{Name: fmt.Sprintf("SETTING_%04d_OF_THE_APPLICATION", i), Value: "1"}
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Env: envs}}}}}}
	const dc = "system:serviceaccount:kube-system:deployment-controller"
	_, read := deploymentHolder(t, dep, dc)
	got := read()
	t.Logf("the holder's Deployment: metadata %d bytes", len(mustJSON(t, got.ObjectMeta)))
	c := env.ClientAs(t, dc)
	got.Status = appsv1.DeploymentStatus{ObservedGeneration: got.Generation, Replicas: 1, UpdatedReplicas: 1, UnavailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetCreated",
			Message: `Created new replica set "app-5d4f8b7c9"`, LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	err := retryRBAC(t, "the Deployment controller's status", func() error { return c.Status().Update(ctx, got) })
	if err != nil {
		t.Errorf("the Deployment controller's status write on the holder's Deployment: %v", err)
	}
}

// TestRound4LeaseLabelsSlowEveryRenewal: a user with update on leases (the elector role, a GitOps tool)
// rewrites a free annotation of a fenced Lease, padded with as many labels as the Lease policy lets in
// (64), from eight goroutines without client-side rate limiting. The elector's renewal, a compare-and-swap
// on its last write, loses to one of those writes again and again; were it only retried so, the holder
// would lose leadership without anyone acquiring the Lease (seen once in CI with three goroutines: I2, "nothing a
// non-holder writes may lock the holder out"). After a lost compare-and-swap the renewal is a JSON patch
// that tests the holder and the epoch, which such writes cannot make fail. The same storm on the unpadded
// Lease is the control.
func TestRound4LeaseLabelsSlowEveryRenewal(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "slow"
	holder := newWorker(t, ns, "app-operator")
	intruder := newWorker(t, ns, "intruder")
	cs, err := kubernetes.NewForConfig(testenv.LimitedConfig(holder.Config)) // an elector at client-go's default limits
	if err != nil {
		t.Fatal(err)
	}
	led := make(chan elector.Token, 1)
	var stopped atomic.Int64
	e, err := elector.New(elector.Config{Client: cs, Namespace: ns, Name: lease, Identity: holder.Holder,
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			led <- tok
			<-ctx.Done()
		},
		OnStoppedLeading: func() { stopped.Add(1) }}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(runCtx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-led:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not lead")
	}
	key := types.NamespacedName{Namespace: ns, Name: lease}
	ic := unthrottled(t, intruder.User)
	edit := func(ctx context.Context, change func(*coordinationv1.Lease)) error {
		return retry.RetryOnConflict(wait.Backoff{Steps: 1000, Duration: time.Millisecond}, func() error {
			var l coordinationv1.Lease
			if err := ic.Get(ctx, key, &l); err != nil {
				return err
			}
			change(&l)
			return ic.Update(ctx, &l)
		})
	}
	storm := func(what string, d time.Duration) {
		sctx, stop := context.WithTimeout(ctx, d)
		defer stop()
		var writes atomic.Int64
		var g sync.WaitGroup
		for n := range 8 {
			g.Go(func() {
				for i := 0; sctx.Err() == nil; i++ {
					if edit(sctx, func(l *coordinationv1.Lease) { l.Annotations["example.com/t"] = fmt.Sprintf("%d-%d", n, i) }) == nil {
						writes.Add(1)
					}
				}
			})
		}
		g.Wait()
		t.Logf("%s: %d writes of a free annotation in %v; the elector leads: %v, stopped leading %d times", what, writes.Load(), d, e.IsLeader(), stopped.Load())
	}
	storm("the unpadded Lease (control)", 10*time.Second)
	if !e.IsLeader() || stopped.Load() > 0 {
		t.Fatalf("the elector lost leadership to a storm of free writes on the unpadded Lease (control)")
	}
	// As many as the bound lets in.
	if err := edit(ctx, func(l *coordinationv1.Lease) {
		for i := 0; len(l.Labels)+len(l.Annotations) < 64; i++ {
			l.Labels[fmt.Sprintf("%x", i)] = ""
		}
	}); err != nil {
		t.Fatalf("the intruder's labels up to the bound: %v", err)
	}
	storm("the Lease with 64 labels and annotations", 20*time.Second)
	if !e.IsLeader() || stopped.Load() > 0 {
		l := env.ReadLease(t, ns, lease)
		t.Errorf("the holder lost leadership to free writes on a Lease padded with short labels (I2); the Lease names holder %q at epoch %s",
			ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations[protocol.EpochAnnotation])
	}
}
