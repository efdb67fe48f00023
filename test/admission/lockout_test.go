package admission_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
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

// The lock-out attacks: writes that need no token and leave the holder unable to write, delete or acquire,
// or that change what its delete does. Each is the attack as a user without the token makes it, then the
// holder's next write of the kind it blocked.

// TestManagedFieldsPaddingLocksOutApply: a GitOps tool created a ConfigMap before a FencingPolicy covered
// it, so its managedFields entry owns data (a field no tokenless write may change). A managedFields-only
// merge patch from it adds 1,400 paths under metadata.finalizers (free) to that entry, growing the object
// toward etcd's request limit. Were it admitted, the holder's next server-side apply would fail with a 500
// ("etcdserver: request is too large": the apiserver retries an oversized update or patch without
// managedFields, never an apply). It is refused (the finalizers it lists are not on the object; the
// bound on the whole object refuses padding with fields the object has: TestFreeWritesAreBounded), and
// the holder's apply of 150 KB goes through.
func TestManagedFieldsPaddingLocksOutApply(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	env.Grant(t, ns, "gitops", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}, "gitops")
	gitops := env.ClientAs(t, "gitops")
	if err := retryRBAC(t, "the GitOps tool's apply", func() error {
		return gitops.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"a": "1"}), client.FieldOwner("gitops"))
	}); err != nil {
		t.Fatal(err)
	}
	holder, tok := configMapHolder(t, ns)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := fenced.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"b": "1"})); err != nil {
		t.Fatalf("the holder's first apply: %v", err)
	}

	cm := readConfigMap(t, ns, "app")
	var entries []map[string]any
	raw, err := json.Marshal(cm.ManagedFields)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		t.Fatal(err)
	}
	padded := false
	for _, e := range entries {
		if e["manager"] != "gitops" {
			continue
		}
		fields := e["fieldsV1"].(map[string]any)
		meta, _ := fields["f:metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			fields["f:metadata"] = meta
		}
		finalizers := map[string]any{".": map[string]any{}}
		for i := range 1400 {
			finalizers[fmt.Sprintf("v:%q", fmt.Sprintf("example.com/%04d-%s", i, strings.Repeat("x", 1000)))] = map[string]any{}
		}
		meta["f:finalizers"] = finalizers
		padded = true
	}
	if !padded {
		t.Fatalf("no managedFields entry of the GitOps tool on ConfigMap %s/app: %v", ns, cm.ManagedFields)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"managedFields": entries}})
	if err != nil {
		t.Fatal(err)
	}
	err = gitops.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}, client.RawPatch(types.MergePatchType, patch))
	// The finalizers listed are not on the object: refused for that before any bound is measured
	// (TestFreeWritesAreBounded pads with fields the object has).
	mustContain(t, "1.4 MB of managedFields paths in the GitOps tool's entry, without a token", err,
		func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonTokenMissing },
		"ConfigMap "+ns+"/app: this write changes metadata.managedFields: it gives ownership of a field the object does not have, under metadata.finalizers")

	big := strings.Repeat("y", 150*1000)
	if err := fenced.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"b": "2", "big": big})); err != nil {
		t.Errorf("the holder's apply of 150 KB after the padding attempt: %v", err)
	}
	if err := patchConfigMap(t, fenced, ns, "app", `{"data":{"c":"3"}}`); err != nil {
		t.Errorf("the holder's merge patch after the padding attempt: %v", err)
	}
	if got := readConfigMap(t, ns, "app"); got.Data["b"] != "2" || got.Data["c"] != "3" || got.Data["a"] != "1" || len(got.ManagedFields) < 2 {
		t.Errorf("after the holder's writes: data a=%q b=%q c=%q, %d managedFields entries; want a=1 b=2 c=3 and the entries kept",
			got.Data["a"], got.Data["b"], got.Data["c"], len(got.ManagedFields))
	}
}

// TestDeclarationsDoNotLockOutAcquisition: a user allowed only to create FencedResources declares 1,501 of
// them bound to a Lease (declaring is free). Fence-on-acquire raising every one of them within the
// elector's PostAcquireTimeout failed each acquisition, at a new epoch each time: an elector at its
// defaults never led. The raise now takes at most half of that time, and the elector leads; a declaration
// left behind is raised by the holder's first write to it.
func TestDeclarationsDoNotLockOutAcquisition(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease, n = "busy", 1501
	env.Grant(t, ns, "declarer", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources"}, Verbs: []string{"create"}}}, "declarer")
	declarer := unthrottled(t, "declarer")
	if err := retryRBAC(t, "the first declaration", func() error {
		return declarer.Create(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "d-0000"},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: lease}})
	}); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	workqueue.ParallelizeUntil(ctx, 8, n-1, func(i int) {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("d-%04d", i+1)},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: lease}}
		if err := declarer.Create(ctx, fr); err != nil && failed.Add(1) == 1 {
			t.Errorf("declaring %s: %v", fr.Name, err)
		}
	})
	if failed.Load() > 0 {
		t.Fatalf("%d declarations failed", failed.Load())
	}

	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "fr-writer", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources"}, Verbs: []string{"get", "list", "watch", "patch", "update"}}}, holder.User)
	cs, err := kubernetes.NewForConfig(testenv.LimitedConfig(holder.Config)) // an elector at client-go's default limits
	if err != nil {
		t.Fatal(err)
	}
	fence, err := fencing.FenceOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	led := make(chan elector.Token, 1)
	e, err := elector.New(elector.Config{Client: cs, Namespace: ns, Name: lease, Identity: holder.Holder, PostAcquire: fence,
		OnStartedLeading: func(ctx context.Context, tok elector.Token) {
			led <- tok
			<-ctx.Done()
		}}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(runCtx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	// The defaults: PostAcquireTimeout = RenewDeadline = 10 s, RetryPeriod 2 s. The first acquisition must lead.
	var tok elector.Token
	select {
	case tok = <-led:
	case <-time.After(elector.DefaultRenewDeadline + 2*elector.DefaultRetryPeriod + 10*time.Second):
		l := env.ReadLease(t, ns, lease)
		t.Fatalf("an elector at its defaults did not lead lease %s/%s with %d declarations bound to it (the Lease: %v, %v)",
			ns, lease, n, l.Annotations, ptr.Deref(l.Spec.HolderIdentity, ""))
	}
	var list fencingv1alpha1.FencedResourceList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	raised := 0
	for _, fr := range list.Items {
		if fr.Spec.FencedEpoch() == tok.Epoch {
			raised++
		}
	}
	t.Logf("led at epoch %d; fence-on-acquire raised %d of %d declarations", tok.Epoch, raised, n)
	if raised < n {
		want := fmt.Sprintf("fence-on-acquire at epoch %d raised %d of %d FencedResource no holder wrote", tok.Epoch, raised, n)
		testenv.Eventually(t, "a FenceIncomplete Event on the Lease", func() (bool, string) {
			var list eventsv1.EventList
			if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return false, err.Error()
			}
			var notes []string
			for _, ev := range list.Items {
				if ev.Reason == "FenceIncomplete" && ev.Regarding.Name == lease && ev.Type == corev1.EventTypeWarning {
					notes = append(notes, ev.Note)
					if strings.HasPrefix(ev.Note, want) {
						return true, ""
					}
				}
			}
			return false, fmt.Sprintf("want a note starting %q, have %q", want, notes)
		})
	}
	key := types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("d-%04d", n-1)}
	fr, err := fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"v": 1})
	if err != nil {
		t.Fatalf("the holder's first write to %s: %v", key, err)
	}
	if fr.Spec.Epoch != tok.Epoch {
		t.Errorf("%s after the holder's first write: epoch %d, want %d (raised by the write)", key, fr.Spec.Epoch, tok.Epoch)
	}
}

// TestBindingsAlias: with a FencingPolicy covering pods, a user allowed to create bindings binds a fenced
// Pod to a node through the core bindings resource, which a webhook rule on pods and pods/* does not
// match. The alias is derived from discovery and decided as pods/binding: refused for that user through
// both routes; the scheduler's binding through either is free.
func TestBindingsAlias(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	binders := []string{"binder", "system:kube-scheduler"}
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/binding", "bindings"},
		Verbs: []string{"*"}}}, append([]string{holder.User}, binders...)...)
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
	}
	for _, name := range []string{"p1", "p2", "p3"} {
		if err := retryRBAC(t, "the holder's pod", func() error { return fenced.Create(ctx, pod(name)) }); err != nil {
			t.Fatal(err)
		}
	}
	binding := func(name, node string) *corev1.Binding {
		return &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	}
	binder := env.ClientAs(t, "binder")
	err := retryRBAC(t, "a binding through bindings", func() error { return binder.Create(ctx, binding("p1", "attacker-node")) })
	mustContain(t, "a user's binding of a fenced Pod through the core bindings resource", err, fencing.IsTokenMissing, "Binding "+ns+"/p1")
	err = binder.SubResource("binding").Create(ctx, pod("p1"), binding("p1", "attacker-node"))
	mustContain(t, "a user's binding of a fenced Pod through pods/binding", err, fencing.IsTokenMissing, "Binding "+ns+"/p1")
	if got := testenv.Read[corev1.Pod](t, env.Client, ns, "p1"); got.Spec.NodeName != "" {
		t.Errorf("Pod %s/p1 bound to %q by a user without the token", ns, got.Spec.NodeName)
	}

	scheduler := env.ClientAs(t, "system:kube-scheduler")
	if err := retryRBAC(t, "the scheduler's binding through bindings", func() error { return scheduler.Create(ctx, binding("p2", "node-a")) }); err != nil {
		t.Errorf("the scheduler's binding through bindings: %v", err)
	}
	if err := scheduler.SubResource("binding").Create(ctx, pod("p3"), binding("p3", "node-b")); err != nil {
		t.Errorf("the scheduler's binding through pods/binding: %v", err)
	}
	for name, node := range map[string]string{"p2": "node-a", "p3": "node-b"} {
		if got := testenv.Read[corev1.Pod](t, env.Client, ns, name); got.Spec.NodeName != node {
			t.Errorf("Pod %s/%s on node %q, want %q (the scheduler's binding)", ns, name, got.Spec.NodeName, node)
		}
	}
}

// TestDeleteOutlastsAConflictStorm: a user relabels the FencedResource the holder is deleting in a tight
// loop, from two goroutines (labels are free). Each relabel between the holder's marker write and its DELETE made the DELETE's
// resourceVersion precondition fail with a conflict, and Writer.Delete gave up after 6 tries (about
// 0.35 s). Writes without the token now wait while the holder's marker is armed, and Writer.Delete
// retries a conflict until its context ends: every delete goes through.
func TestDeleteOutlastsAConflictStorm(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "relabeller")
	tok := holder.Acquire(t, ns, "l", 1)
	const n = 15
	keys := make([]types.NamespacedName, n)
	w := fencing.NewWriter(unthrottled(t, holder.User))
	for i := range keys {
		keys[i] = declare(t, ns, fmt.Sprintf("r%02d", i), "l")
		if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
			return w.Set(ctx, tok, keys[i], map[string]any{"v": i})
		}); err != nil {
			t.Fatal(err)
		}
	}
	relabeller := unthrottled(t, "relabeller")
	// The storm relabels the resource being deleted, from two goroutines, as fast as the apiserver takes it.
	var target atomic.Pointer[types.NamespacedName]
	target.Store(&keys[0])
	stormCtx, stop := context.WithCancel(ctx)
	var storm sync.WaitGroup
	var relabels, refused atomic.Int64
	for g := range 2 {
		storm.Go(func() {
			for i := 0; stormCtx.Err() == nil; i++ {
				key := target.Load()
				patch := fmt.Sprintf(`{"metadata":{"labels":{"storm-%d":"%d"}}}`, g, i)
				err := relabeller.Patch(stormCtx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
					client.RawPatch(types.MergePatchType, []byte(patch)))
				switch {
				case err == nil:
					relabels.Add(1)
				case fencing.IsTokenMissing(err):
					refused.Add(1)
				}
			}
		})
	}
	testenv.Eventually(t, "the storm relabels", func() (bool, string) { return relabels.Load() > 20, fmt.Sprint(relabels.Load()) })
	for _, key := range keys {
		target.Store(&key)
		dctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		if err := w.Delete(dctx, tok, key); err != nil {
			t.Errorf("the holder's delete of %s during the storm: %v", key, err)
		}
		cancel()
	}
	stop()
	storm.Wait()
	t.Logf("%d relabels admitted and %d refused (the holder's marker armed) during the deletes", relabels.Load(), refused.Load())
}

// limited is a client of w's user with client-go's default rate limit (testenv.LimitedConfig): the suite's
// users send without one (testenv.WithUnthrottledUsers).
func limited(t *testing.T, w worker) client.Client {
	t.Helper()
	c, err := client.New(testenv.LimitedConfig(w.Config), client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// unthrottled is a client authenticated as user without client-side rate limiting: an attacker sends as
// fast as the apiserver takes it.
func unthrottled(t *testing.T, user string) client.Client {
	t.Helper()
	_, cfg, err := env.UserClient(user)
	if err != nil {
		t.Fatal(err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	c, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func retryRBACValue[T any](t *testing.T, what string, write func() (T, error)) (T, error) {
	t.Helper()
	var v T
	err := retryRBAC(t, what, func() error {
		var err error
		v, err = write()
		return err
	})
	return v, err
}

// TestDeletionSemanticsAreFenced: what a delete does to the dependents is the holder's. Without the token
// nobody may add the orphan or foregroundDeletion finalizer (the holder's DELETE without options would then
// orphan what it meant to delete), remove one from an object being deleted (undoing the holder's choice),
// or send a second DELETE whose propagation changes them; a second DELETE without options, and the garbage
// collector's removal once it has done what they ask, are free.
func TestDeletionSemanticsAreFenced(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor", admission.GarbageCollectorUser)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	gc := env.ClientAs(t, admission.GarbageCollectorUser)
	labels := map[string]string{"app": "fenced"}
	create := func(name string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"v": "1"}}
		if err := retryRBAC(t, "the holder's create", func() error { return fenced.Create(ctx, cm) }); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	finalizers := func(name string) []string { return readConfigMap(t, ns, name).Finalizers }
	del := func(c client.Client, name string, opts ...client.DeleteOption) error {
		return c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, opts...)
	}

	create("owner")
	for _, f := range []string{"orphan", "foregroundDeletion"} {
		err := retryRBAC(t, "an editor's finalizer", func() error {
			return patchConfigMap(t, editor, ns, "owner", fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, f))
		})
		mustContain(t, "an editor adds the "+f+" finalizer", err, fencing.IsTokenMissing, "metadata.finalizers")
	}
	if err := patchConfigMap(t, editor, ns, "owner", `{"metadata":{"finalizers":["example.com/keep"]}}`); err != nil {
		t.Errorf("an editor adds another finalizer (free): %v", err)
	}

	// The holder deletes in the foreground: the apiserver adds foregroundDeletion (no garbage collector
	// runs here, so it stays).
	if err := fenced.Delete(ctx, readConfigMap(t, ns, "owner"), client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatalf("the holder's foreground delete: %v", err)
	}
	if f := finalizers("owner"); !containsString(f, "foregroundDeletion") {
		t.Fatalf("finalizers after the holder's foreground delete: %v", f)
	}
	for _, p := range []metav1.DeletionPropagation{metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground} {
		mustContain(t, "an editor's second DELETE with propagationPolicy "+string(p), del(editor, "owner", client.PropagationPolicy(p)),
			fencing.IsNotHolder, "is being deleted", "propagationPolicy="+string(p))
	}
	mustContain(t, "an editor's second DELETE with orphanDependents", del(editor, "owner", client.DeleteOption(orphanDependents(true))),
		fencing.IsNotHolder, "is being deleted")
	if err := del(editor, "owner"); err != nil {
		t.Errorf("an editor's second DELETE without options (changes nothing): %v", err)
	}
	mustContain(t, "an editor removes foregroundDeletion", patchConfigMap(t, editor, ns, "owner", `{"metadata":{"finalizers":["example.com/keep"]}}`),
		fencing.IsTokenMissing, "metadata.finalizers")
	if f := finalizers("owner"); !containsString(f, "foregroundDeletion") {
		t.Errorf("finalizers after the refused writes: %v, want foregroundDeletion kept", f)
	}
	if err := retryRBAC(t, "the garbage collector's removal", func() error {
		return patchConfigMap(t, gc, ns, "owner", `{"metadata":{"finalizers":["example.com/keep"]}}`)
	}); err != nil {
		t.Errorf("the garbage collector removes foregroundDeletion from an object being deleted: %v", err)
	}

	// The holder deletes orphaning: nobody but the garbage collector undoes it.
	create("orphaner")
	if err := fenced.Delete(ctx, readConfigMap(t, ns, "orphaner"), client.PropagationPolicy(metav1.DeletePropagationOrphan)); err != nil {
		t.Fatalf("the holder's orphaning delete: %v", err)
	}
	mustContain(t, "an editor's second DELETE with propagationPolicy Background on an orphaning delete",
		del(editor, "orphaner", client.PropagationPolicy(metav1.DeletePropagationBackground)), fencing.IsNotHolder, "would have its dependents deleted in the background instead of orphaned")
	mustContain(t, "an editor removes the orphan finalizer", patchConfigMap(t, editor, ns, "orphaner", `{"metadata":{"finalizers":null}}`),
		fencing.IsTokenMissing, "metadata.finalizers")
	if f := finalizers("orphaner"); !containsString(f, "orphan") {
		t.Errorf("finalizers after the refused writes: %v, want orphan kept", f)
	}
}

// orphanDependents is DeleteOptions.OrphanDependents (deprecated, still served).
type orphanDependents bool

func (o orphanDependents) ApplyToDelete(opts *client.DeleteOptions) {
	if opts.Raw == nil {
		opts.Raw = &metav1.DeleteOptions{}
	}
	opts.Raw.OrphanDependents = ptr.To(bool(o)) //nolint:staticcheck // the attack uses the deprecated field, which the apiserver still serves
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestCompareAndSwapOutlastsAFreeWriteLoop: a user churns the finalizers of a covered ConfigMap, and the
// labels of a FencedResource, from two goroutines each (both free). The holder's compare-and-swap writes
// (a read, then an Update that carries its resourceVersion) lost every race for their whole deadline. The
// fenced clients now hold the object after a conflict: writes without the token wait until the holder's
// retry has written, and that write removes the hold.
func TestCompareAndSwapOutlastsAFreeWriteLoop(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "churner")
	grantFencedResources(t, ns, holder.User, "churner")
	fast := unthrottled(t, holder.User)
	fenced := fencing.NewClient(fast, tokenOf(tok))
	if err := fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"n": "0"}}); err != nil {
		t.Fatal(err)
	}
	key := declare(t, ns, "orders", appLease)
	w := fencing.NewWriter(fast)
	if _, err := retryRBACValue(t, "the holder's first write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"n": 0})
	}); err != nil {
		t.Fatal(err)
	}

	churner := unthrottled(t, "churner")
	stormCtx, stop := context.WithCancel(ctx)
	var storm sync.WaitGroup
	var admitted, held atomic.Int64
	count := func(err error) {
		switch {
		case err == nil:
			admitted.Add(1)
		case fencing.IsTokenMissing(err):
			held.Add(1)
		}
	}
	for g := range 2 {
		storm.Go(func() {
			for i := 0; stormCtx.Err() == nil; i++ {
				count(patchConfigMap(t, churner, ns, "app", fmt.Sprintf(`{"metadata":{"finalizers":["example.com/churn-%d-%d"]}}`, g, i)))
			}
		})
		storm.Go(func() {
			for i := 0; stormCtx.Err() == nil; i++ {
				count(churner.Patch(stormCtx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
					client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"churn-%d":"%d"}}}`, g, i)))))
			}
		})
	}
	testenv.Eventually(t, "the churn writes", func() (bool, string) { return admitted.Load() > 20, fmt.Sprint(admitted.Load()) })
	for i := 1; i <= 5; i++ {
		wctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		err := retry.OnError(wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 8}, apierrors.IsConflict, func() error {
			var cm corev1.ConfigMap
			if err := fast.Get(wctx, types.NamespacedName{Namespace: ns, Name: "app"}, &cm); err != nil {
				return err
			}
			cm.Data["n"] = fmt.Sprint(i)
			return fenced.Update(wctx, &cm)
		})
		if err != nil {
			t.Errorf("the holder's compare-and-swap update %d of ConfigMap %s/app during the churn: %v", i, ns, err)
		}
		if _, err := w.Update(wctx, tok, key, func(data map[string]any) error { data["n"] = i; return nil }); err != nil {
			t.Errorf("the holder's Writer.Update %d of %s during the churn: %v", i, key, err)
		}
		cancel()
	}
	stop()
	storm.Wait()
	t.Logf("churn: %d free writes admitted, %d held for the holder", admitted.Load(), held.Load())
	if got := readConfigMap(t, ns, "app"); got.Data["n"] != "5" || got.Annotations[fencingv1alpha1.HoldAtEpochAnnotation] != "" {
		t.Errorf("ConfigMap after the holder's updates: n=%q, hold %q; want n=5 and no hold", got.Data["n"], got.Annotations[fencingv1alpha1.HoldAtEpochAnnotation])
	}
	if err := patchConfigMap(t, churner, ns, "app", `{"metadata":{"finalizers":null}}`); err != nil {
		t.Errorf("a free write once the holder has written (the hold gone): %v", err)
	}
}
