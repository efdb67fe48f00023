//go:build openholes

package admission_test

// The independent attacker's findings that are not closed yet, each as the test that fails while the hole
// is open (or, for the load-dependent ones, fails on a loaded machine): make test does not build them.
// Run them with
//
//	go test -tags openholes -count=1 -run 'TestIndependent' -v ./test/admission/
//
// and move a test to independent_attack_test.go with the fix that closes its hole.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestIndependentLeaseAnnotationsAtTheLimit: the Lease policy leaves a fenced Lease's other annotations
// free to anyone with RBAC on Leases: another workload with the fencekit-elector role (update on leases)
// fills them exactly to the apiserver's 256 KiB bound. The holder's next acquisition writes epoch 10 where
// 9 stood (one byte more) and is refused by the apiserver's validation: the holder (and every elector) is
// locked out of the Lease until an admin trims it, without the attacker ever holding it (I2/I3).
func TestIndependentLeaseAnnotationsAtTheLimit(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease = "pad"
	holder := newWorker(t, ns, "app-operator")
	intruder := newWorker(t, ns, "intruder")
	holder.Acquire(t, ns, lease, 9)
	var l coordinationv1.Lease
	if err := intruder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &l); err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, v := range l.Annotations {
		n += len(k) + len(v)
	}
	l.Annotations["example.com/pad"] = strings.Repeat("x", annotationLimit-n-len("example.com/pad"))
	err := intruder.Client.Update(ctx, &l)
	t.Logf("another elector-role user fills the Lease's annotations to %d bytes: %v", annotationLimit, err)

	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur coordinationv1.Lease
		if err := holder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &cur); err != nil {
			return err
		}
		testenv.AcquiredBy(&cur, holder.User, holder.Holder, 10, 15*time.Second)
		return holder.Client.Update(ctx, &cur, testenv.Presenting(10))
	})
	if err != nil {
		t.Errorf("the holder's acquisition at epoch 10 after another elector-role user padded the Lease: %v", err)
	}
}

// TestIndependentStatusStormDuringDelete: fencekit's FencedResource webhook matches fencedresources, not
// fencedresources/status, so a status write is decided by RBAC alone (the operator's ServiceAccount has it,
// and an admin may grant it to a dashboard or a GitOps tool). Each status write changes the resourceVersion,
// so a user with patch on fencedresources/status alone, writing status in a loop, makes the holder's DELETE
// (whose precondition is its marker write's resourceVersion) conflict until its context ends: the armed
// marker refuses only writes the webhook sees (I2).
func TestIndependentStatusStormDuringDelete(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User)
	env.Grant(t, ns, "fr-status", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources/status"}, Verbs: []string{"get", "patch", "update"}}}, "status-writer")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "target", "l")
	w := fencing.NewWriter(unthrottled(t, holder.User))
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	sw := unthrottled(t, "status-writer")
	statusPatch := func(ctx context.Context, i int) error {
		p := fmt.Sprintf(`{"status":{"observedGeneration":%d}}`, i)
		return sw.Status().Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(p)))
	}
	if err := retryRBAC(t, "the status writer's patch", func() error { return statusPatch(ctx, 1) }); err != nil {
		t.Fatalf("a status write by a user with RBAC on fencedresources/status only: %v", err)
	}
	stormCtx, stop := context.WithCancel(ctx)
	var storm sync.WaitGroup
	var writes atomic.Int64
	for g := range 4 {
		storm.Go(func() {
			for i := 0; stormCtx.Err() == nil; i++ {
				if statusPatch(stormCtx, g*1000000+i+2) == nil {
					writes.Add(1)
				}
			}
		})
	}
	testenv.Eventually(t, "the storm writes status", func() (bool, string) { return writes.Load() > 20, fmt.Sprint(writes.Load()) })
	dctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
	err := w.Delete(dctx, tok, key)
	cancel()
	stop()
	storm.Wait()
	t.Logf("%d status writes admitted", writes.Load())
	if err != nil {
		t.Errorf("the holder's Writer.Delete during a status storm by a user with RBAC on fencedresources/status only (I2): %v", err)
		if err := w.Delete(ctx, tok, key); err != nil {
			t.Errorf("the holder's Writer.Delete once the storm stopped (control): %v", err)
		}
	}
}

// TestIndependentFatDeclarationsSlowTheFenceList: fence-on-acquire bounds the time of its raises (half of
// PostAcquireTimeout), but its List of the bound FencedResources is not bounded: anyone allowed to create
// FencedResources may declare them with 256 KiB of annotations and as many labels as the 512 KiB bound
// lets in. The List the acquisition makes then grows with what non-holders created (I3). The test times
// the fence at the elector's default PostAcquireTimeout and reports the List's share.
func TestIndependentFatDeclarationsSlowTheFenceList(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease, n = "fat", 250
	holder := newWorker(t, ns, "app-operator")
	holder.Fences.FencedResources = true
	env.Grant(t, ns, "fr-all", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencedresources"}, Verbs: []string{"get", "list", "watch", "patch", "update", "create", "delete"}}}, holder.User, "declarer")
	tok := holder.Acquire(t, ns, lease, 1)
	written := declare(t, ns, "written", lease)
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, written, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	declarer := unthrottled(t, "declarer")
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4)[:252] + "x"
	labels := map[string]string{}
	for i := range 300 {
		labels[fmt.Sprintf("%s/%063d", prefix, i)] = strings.Repeat("v", 63)
	}
	// Room left for the writer annotation the raise adds: this test is about the List, not the limit.
	ann := map[string]string{"example.com/pad": strings.Repeat("x", annotationLimit-len("example.com/pad")-4096)}
	var failed atomic.Int64
	workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("fat-%04d", i), Labels: labels, Annotations: ann},
			Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: lease}}
		if err := retryRBAC(t, "a fat declaration", func() error { return declarer.Create(ctx, fr) }); err != nil && failed.Add(1) == 1 {
			t.Errorf("declaring %s: %v", fr.Name, err)
		}
	})
	if failed.Load() > 0 {
		t.Fatalf("%d declarations failed", failed.Load())
	}
	fc, err := fencing.FenceOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var list fencingv1alpha1.FencedResourceList
	if err := holder.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{"spec.leaseName": lease}); err != nil {
		t.Fatal(err)
	}
	listTook := time.Since(start)
	tok2 := holder.Acquire(t, ns, lease, 2)
	fctx, cancel := context.WithTimeout(ctx, elector.DefaultRenewDeadline)
	defer cancel()
	start = time.Now()
	err = fc.Raise(fctx, tok2)
	took := time.Since(start)
	t.Logf("%d fat declarations (%d bytes each): a List of them took %v; the fence took %v: %v", n, len(ann["example.com/pad"])+300*710, listTook, took, err)
	// The raises are bounded by half of PostAcquireTimeout; allow one more second for the List of the
	// resources. More than that is time the acquisition spends on what non-holders created.
	if err != nil || took > elector.DefaultRenewDeadline/2+time.Second {
		t.Errorf("fence-on-acquire at the default PostAcquireTimeout with %d fat declarations took %v (I3: bounded by %v plus the List): %v",
			n, took, elector.DefaultRenewDeadline/2, err)
	}
	if got := get(t, written); got.Spec.Epoch != 2 {
		t.Errorf("the holder-written resource at epoch %d after the fence, want 2", got.Spec.Epoch)
	}
}

// TestIndependentPolicyOnUnwritableResource: a namespace admin (RBAC on FencingPolicies, nothing else of
// the holder's) declares, for the holder's Lease, a resource the holder's fence cannot list or patch
// (Secrets). Every acquisition's fence-on-acquire then fails: a non-holder locks the holder out without
// holding the Lease.
func TestIndependentPolicyOnUnwritableResource(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns)
	holder.Fences.Objects = true
	env.Grant(t, ns, "holder-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"list"}}}, holder.User)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
	}); err != nil {
		t.Fatal(err)
	}
	tok2 := holder.Acquire(t, ns, appLease, 2)
	if err := retryRBAC(t, "the fence before the admin's policy", func() error {
		return fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, tok2)
	}); err != nil {
		t.Fatalf("the fence before the admin's policy: %v", err)
	}
	env.Grant(t, ns, "ns-admin", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"*"}}, {APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}}}, "ns-admin")
	admin := env.ClientAs(t, "ns-admin")
	if err := retryRBAC(t, "the admin's secret", func() error {
		return admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}})
	}); err != nil {
		t.Fatal(err)
	}
	err := retryRBAC(t, "the admin's policy", func() error {
		return admin.Create(ctx, &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "more"},
			Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Resource: "secrets"}}}})
	})
	t.Logf("a namespace admin declares secrets for the holder's Lease: %v", err)
	tok3 := holder.Acquire(t, ns, appLease, 3)
	if err := fencing.FenceObjectsOnAcquire(holder.Client, holder.Client).Raise(ctx, tok3); err != nil {
		t.Errorf("the holder's fence-on-acquire after a namespace admin's policy (lock-out by a non-holder): %v", err)
	}
}

// TestIndependentFreeWriteStormVersusUpdate: free writes (a FencedResource's labels, a ConfigMap's
// finalizers) change the resourceVersion at any rate anyone cares to send them. The holder's read-modify-write
// (Writer.Update, which retries conflicts until its deadline; fencing.NewClient's Update in a
// RetryOnConflict loop) then conflicts on every try: "update" is one of the holder's writes I2 names.
func TestIndependentFreeWriteStormVersusUpdate(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, _ := configMapHolder(t, ns, "editor")
	holder.LeaseDuration = 10 * time.Minute
	tok := holder.Acquire(t, ns, appLease, 2)
	grantFencedResources(t, ns, holder.User, "editor")
	frTok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "target", "l")
	w := fencing.NewWriter(unthrottled(t, holder.User))
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, frTok, key, map[string]any{"v": 0})
	}); err != nil {
		t.Fatal(err)
	}
	editor := unthrottled(t, "editor")
	admitted, stop := storm(t, 8, func(ctx context.Context, g, i int) error {
		return editor.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"storm-%d":"%d"}}}`, g, i))))
	})
	var failures int
	for i := range 3 {
		uctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		_, err := w.Update(uctx, frTok, key, func(d map[string]any) error { d["v"] = i + 1; return nil })
		cancel()
		if err != nil {
			failures++
			t.Logf("the holder's Writer.Update %d during a relabel storm: %v", i, err)
		}
	}
	stop()
	t.Logf("%d relabels admitted; %d of 3 Writer.Update calls failed", admitted.Load(), failures)
	if failures > 0 {
		t.Errorf("the holder's Writer.Update failed %d of 3 times under a storm of free relabels (I2)", failures)
	}

	fenced := fencing.NewClient(unthrottled(t, holder.User), tokenOf(tok))
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"v": "0"}})
	}); err != nil {
		t.Fatal(err)
	}
	admitted, stop = storm(t, 8, func(ctx context.Context, g, i int) error {
		return patchConfigMap(t, editor, ns, "app", fmt.Sprintf(`{"metadata":{"finalizers":["example.com/f-%d-%d"]}}`, g, i%2))
	})
	failures = 0
	for i := range 3 {
		uctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		err := retry.OnError(wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 200, Cap: 64 * time.Millisecond}, apierrors.IsConflict, func() error {
			var cm corev1.ConfigMap
			if err := fenced.Get(uctx, types.NamespacedName{Namespace: ns, Name: "app"}, &cm); err != nil {
				return err
			}
			cm.Data["v"] = fmt.Sprint(i + 1)
			return fenced.Update(uctx, &cm)
		})
		cancel()
		if err != nil {
			failures++
			t.Logf("the holder's NewClient.Update %d during a finalizer storm: %v", i, err)
		}
	}
	stop()
	_ = patchConfigMap(t, env.Client, ns, "app", `{"metadata":{"finalizers":null}}`)
	t.Logf("%d finalizer writes admitted; %d of 3 NewClient.Update loops failed", admitted.Load(), failures)
	if failures > 0 {
		t.Errorf("the holder's NewClient.Update (Get, Update, retried on conflict for 10 s) failed %d of 3 times under a storm of free finalizer writes (I2)", failures)
	}
}

// TestIndependentSquattedOwnerSurvivesTheHoldersApply: a FencingPolicy selects ConfigMaps labelled
// app=fenced. A user allowed to write ConfigMaps (not the holder) creates "app" before the holder does,
// without the label (so uncovered: free), with an owner reference to a ConfigMap it controls and the orphan
// finalizer. The holder's fenced server-side apply of "app" with the label is admitted (an object it now
// fences) and keeps the squatter's owner reference and finalizer: deleting the squatter's owner has the
// garbage collector delete the holder's object (its DELETE is always admitted), data and all (I1:
// ownership of a fenced object the holder never wrote).
func TestIndependentSquattedOwnerSurvivesTheHoldersApply(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "squatter")
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	enforced(t, ns, "app", map[string]string{"app": "fenced"})
	tok := holder.Acquire(t, ns, appLease, 1)
	squatter := env.ClientAs(t, "squatter")
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "squatters-owner"}}
	if err := retryRBAC(t, "the squatter's owner", func() error { return squatter.Create(ctx, owner) }); err != nil {
		t.Fatal(err)
	}
	squat := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}}}
	if err := squatter.Create(ctx, squat); err != nil {
		t.Fatalf("the squatter's uncovered ConfigMap: %v", err)
	}
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's apply", func() error {
		return fenced.Apply(ctx, corev1ac.ConfigMap("app", ns).WithLabels(map[string]string{"app": "fenced"}).WithData(map[string]string{"v": "1"}))
	}); err != nil {
		t.Fatalf("the holder's apply: %v", err)
	}
	got := readConfigMap(t, ns, "app")
	t.Logf("after the holder's apply: labels %v, owners %v", got.Labels, got.OwnerReferences)
	if len(got.OwnerReferences) > 0 {
		t.Errorf("the holder's fenced ConfigMap %s/app is owned by %v, which a user without the token set (the garbage collector deletes it with that owner)", ns, got.OwnerReferences)
	}
}

// TestIndependentPolicyNarrowedMidTerm: a namespace admin (RBAC on FencingPolicies and ConfigMaps, not the
// holder) narrows the holder's FencingPolicy to a selector its ConfigMap does not match while the Lease is
// held, overwrites the ConfigMap's data without a token, and widens the policy again. The docs leave
// FencingPolicies to RBAC ("deleting a policy stops fencing its objects"): this documents that a policy
// edit is a way around I1 for whoever may edit policies.
func TestIndependentPolicyNarrowedMidTerm(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "ns-admin")
	env.Grant(t, ns, "policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"*"}}}, "ns-admin")
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"v": "holder"}})
	}); err != nil {
		t.Fatal(err)
	}
	admin := env.ClientAs(t, "ns-admin")
	var p fencingv1alpha1.FencingPolicy
	err := retryRBAC(t, "the admin's policy edit", func() error {
		if err := admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "app"}, &p); err != nil {
			return err
		}
		p.Spec.Resources[0].Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"nothing": "matches"}}
		return admin.Update(ctx, &p)
	})
	t.Logf("the admin narrows the policy: %v", err)
	testenv.Eventually(t, "a write without the token is decided on the narrowed policy", func() (bool, string) {
		err := patchConfigMap(t, admin, ns, "app", `{"data":{"v":"admin"}}`)
		return err == nil || !fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	if got := readConfigMap(t, ns, "app"); got.Data["v"] != "holder" {
		t.Errorf("the holder's fenced ConfigMap overwritten without the token after a policy edit by a namespace admin: v=%q", got.Data["v"])
	}
}

// TestIndependentLeaseFloodWidensTheCopyLag: the webhooks' copy of the Lease is an informer of every fenced
// Lease in the cluster; after a release it may show the holder live "for as long as the copy lags", a
// residual the docs accept because the lag is short. Any user with the fencekit-elector role may create a
// fenced Lease and rewrite its free labels (up to etcd's limit, no bound) as fast as the apiserver takes
// them: every replica's informer decodes each megabyte. The test floods one such Lease, releases the
// holder's Lease, and counts the holder's writes with its (now released) token that are still admitted:
// each one is a write after the release that the quorum read refuses (I1 on a lagging copy, widened by a
// non-holder).
func TestIndependentLeaseFloodWidensTheCopyLag(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.Fences.FencedResources = true
	grantFencedResources(t, ns, holder.User)
	key := declare(t, ns, "target", "l")
	tok := holder.Acquire(t, ns, "l", 1)
	w := fencing.NewWriter(unthrottled(t, holder.User))
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 0})
	}); err != nil {
		t.Fatal(err)
	}
	intruder := newWorker(t, ns, "intruder")
	intruder.Acquire(t, ns, "flood", 1)
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4)[:252] + "x"
	labels := map[string]string{}
	for i := range 2500 {
		labels[fmt.Sprintf("%s/%063d", prefix, i)] = strings.Repeat("v", 63)
	}
	ic := intruder.Client
	admitted, stop := stormAtLeast(t, 4, 2, func(ctx context.Context, g, i int) error {
		var l coordinationv1.Lease
		if err := ic.Get(ctx, types.NamespacedName{Namespace: ns, Name: "flood"}, &l); err != nil {
			return err
		}
		for k, v := range labels {
			l.Labels[k] = v
		}
		l.Labels["tick"] = fmt.Sprintf("%d-%d", g, i)
		return ic.Update(ctx, &l)
	})
	time.Sleep(3 * time.Second)
	holder.Release(t, tok)
	released := time.Now()
	var after int
	var last time.Duration
	for time.Since(released) < 3*time.Second {
		if _, err := w.Set(ctx, tok, key, map[string]any{"v": time.Since(released).String()}); err == nil {
			after++
			last = time.Since(released)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	t.Logf("%d flood updates of about 1 MB; %d of the holder's writes admitted after its release, the last %v after it", admitted.Load(), after, last)
	if after > 0 {
		t.Errorf("%d writes with a released token admitted after the release, the last %v after it, while another elector-role user flooded a fenced Lease", after, last)
	}
}

// TestIndependentPaddedHolderObjectsSlowTheObjectFence: non-holders cannot create covered objects, but may
// pad the holder's own with finalizers up to the 512 KiB bound. FenceObjectsOnAcquire lists every declared
// object (unbounded) and raises the holder-written ones first, each raise moving the padded object through
// the webhook twice: with enough of them the acquisition misses the default PostAcquireTimeout, or leaves
// holder-written objects unraised (I3).
func TestIndependentPaddedHolderObjectsSlowTheObjectFence(t *testing.T) {
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
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4)[:252] + "x"
	fins := make([]string, 780)
	for i := range fins {
		fins[i] = fmt.Sprintf("%s/%063d", prefix, i)
	}
	pad := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": fins}})
	var failed atomic.Int64
	workqueue.ParallelizeUntil(ctx, 4, n, func(i int) {
		name := fmt.Sprintf("cm-%03d", i)
		err := retryRBAC(t, "the holder's create", func() error {
			return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": "1"}})
		})
		if err == nil {
			err = retryRBAC(t, "the editor's padding", func() error { return patchConfigMap(t, editor, ns, name, string(pad)) })
		}
		if err != nil && failed.Add(1) == 1 {
			t.Errorf("%s: %v", name, err)
		}
	})
	t.Cleanup(func() {
		for i := range n {
			_ = patchConfigMap(t, env.Client, ns, fmt.Sprintf("cm-%03d", i), `{"metadata":{"finalizers":null}}`)
		}
	})
	if failed.Load() > 0 {
		t.Fatalf("%d objects not padded", failed.Load())
	}
	fc, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	tok2 := holder.Acquire(t, ns, appLease, 2)
	fctx, cancel := context.WithTimeout(ctx, elector.DefaultRenewDeadline)
	defer cancel()
	start := time.Now()
	err = fc.Raise(fctx, tok2)
	raised := 0
	for i := range n {
		if objectEpoch(t, ns, fmt.Sprintf("cm-%03d", i)) == "2" {
			raised++
		}
	}
	t.Logf("%d holder-written ConfigMaps padded to about 512 KiB by a user without the token: the fence took %v (%v); %d raised", n, time.Since(start), err, raised)
	if err != nil || raised < n {
		t.Errorf("fence-on-acquire at the default PostAcquireTimeout: %v; %d of %d holder-written objects raised (I3)", err, raised, n)
	}
}

// TestIndependentFinalizerTimesTheLoss: a user without the token adds a free finalizer to a FencedResource.
// The holder deletes it (Writer.Delete returns: the DELETE only set deletionTimestamp), then writes the
// same key again (Writer.Set): admitted, on the object still being deleted. The user removes its finalizer
// whenever it likes, and the holder's later write goes with the object: a non-holder chooses when, and
// whether, the holder's acknowledged data is lost ("nothing is lost").
func TestIndependentFinalizerTimesTheLoss(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantFencedResources(t, ns, holder.User, "editor")
	tok := holder.Acquire(t, ns, "l", 1)
	key := declare(t, ns, "x", "l")
	w := fencing.NewWriter(holder.Client)
	if _, err := retryRBACValue(t, "the holder's write", func() (*fencingv1alpha1.FencedResource, error) {
		return w.Set(ctx, tok, key, map[string]any{"v": 1})
	}); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's finalizer", func() error {
		return mergePatch(t, editor, key, `{"metadata":{"finalizers":["example.com/hold"]}}`)
	}); err != nil {
		t.Fatalf("a free finalizer: %v", err)
	}
	t.Cleanup(func() { _ = mergePatch(t, env.Client, key, `{"metadata":{"finalizers":null}}`) })
	if err := w.Delete(ctx, tok, key); err != nil {
		t.Fatalf("the holder's delete: %v", err)
	}
	_, err := w.Set(ctx, tok, key, map[string]any{"v": 2})
	t.Logf("the holder's Writer.Set after its delete, the object held by the editor's finalizer: %v", err)
	if err != nil {
		return // refused: the holder knows its write did not land
	}
	if err := mergePatch(t, editor, key, `{"metadata":{"finalizers":null}}`); err != nil {
		t.Logf("the editor's removal of its finalizer: %v", err)
	}
	var fr fencingv1alpha1.FencedResource
	if err := env.Client.Get(ctx, key, &fr); apierrors.IsNotFound(err) {
		t.Errorf("the holder's acknowledged write (v=2, admitted after its delete) was lost when a user without the token removed its finalizer")
	}
}

// TestIndependentAnyKubeSystemAccountDeletesFencedPods: the rule's "cluster's own controllers"
// (clusterController) are every kube-system ServiceAccount, so an add-on's ServiceAccount there (a
// descheduler, a CNI agent, here kube-system:some-addon) with delete on pods deletes a fenced Pod while
// the Lease is live, without the token. The threat model says any other kube-system ServiceAccount follows
// the rules of any user but for the writes cluster-controllers.md lists (I1 deletion, if that is not meant).
func TestIndependentAnyKubeSystemAccountDeletesFencedPods(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const addon = "system:serviceaccount:kube-system:some-addon"
	holder := newWorker(t, ns, "app-operator")
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}}}, holder.User, addon)
	grantObjects(t, ns, holder.User, addon)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"},
		fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's pod", func() error {
		return fenced.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}})
	}); err != nil {
		t.Fatal(err)
	}
	a := env.ClientAs(t, addon)
	err := retryRBAC(t, "the add-on's delete", func() error {
		return a.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}})
	})
	mustContain(t, "an add-on's kube-system ServiceAccount deletes a fenced Pod while the Lease is live", err, nil)
}
