package admission_test

// Round 11 of the independent attacker (against 1ccc9d6, 37 minutes; decision 0045). Each test asserts the
// invariant it tries to break: it fails while the attack works, and passes once the rule holds. Its two
// attempts that held and take most of a minute each are in independent_round11_held_test.go (-tags
// openholes).

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round11Unthrottled is a client of user (and groups) without client-side rate limiting.
func round11Unthrottled(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	_, cfg, err := env.UserClient(user, groups...)
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

// round11Storm runs write from g goroutines until the returned stop is called; it counts admitted writes
// and the first refusal.
func round11Storm(t *testing.T, g int, write func(ctx context.Context, g, i int) error) (admitted *atomic.Int64, firstErr func() string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	admitted = &atomic.Int64{}
	var mu sync.Mutex
	first := ""
	var wg sync.WaitGroup
	for k := range g {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				err := write(ctx, k, i)
				switch {
				case err == nil:
					admitted.Add(1)
				case ctx.Err() == nil:
					mu.Lock()
					if first == "" {
						first = round9Short(err)
					}
					mu.Unlock()
				}
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return admitted, func() string { mu.Lock(); defer mu.Unlock(); return first }, stop
}

// round11CAS runs n compare-and-swap writes of the holder, each as TestCompareAndSwapOutlastsAFreeWriteLoop
// makes them (read, change, fenced Update; a conflict retried with backoff 1 ms x2, 8 steps, within
// fencing.DefaultWriteTimeout): it returns how many failed, the conflicts seen and the first failure.
func round11CAS(t *testing.T, n int, write func(ctx context.Context, i int) error) (failed, conflicts int, first string, took time.Duration) {
	t.Helper()
	start := time.Now()
	for i := 1; i <= n; i++ {
		wctx, cancel := context.WithTimeout(t.Context(), fencing.DefaultWriteTimeout)
		err := retry.OnError(wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 8}, func(err error) bool {
			if apierrors.IsConflict(err) {
				conflicts++
				return true
			}
			return false
		}, func() error { return write(wctx, i) })
		cancel()
		if err != nil {
			failed++
			if first == "" {
				first = round9Short(err)
			}
		}
	}
	return failed, conflicts, first, time.Since(start)
}

// TestRound11ControllerStatusStormStarvesTheHoldersCAS: persona: a kube-controller-manager controller's
// credential (system:serviceaccount:kube-system:deployment-controller: the controller itself misbehaving,
// or its token stolen). Route: deployments/status merge patches (observedGeneration, a free status write
// for that controller), in a loop from four goroutines. Invariant I2 (headroom: nothing admitted without
// the token can make the holder's next write fail). The hold (decision 0031) stops tokenless writes while
// the holder retries a lost compare-and-swap, but "the cluster's own controllers never wait". The holder
// makes five compare-and-swap updates of its covered Deployment (fenced client, retried on conflict as
// TestCompareAndSwapOutlastsAFreeWriteLoop does): every one must succeed.
func TestRound11ControllerStatusStormStarvesTheHoldersCAS(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	const controller = "system:serviceaccount:kube-system:deployment-controller"
	dep := testenv.Deployment(ns, "app")
	_, read := deploymentHolder(t, dep, controller)
	// The holder's fenced client without client-side rate limiting, so that only the apiserver's answers count.
	hc := fencing.NewClient(round11Unthrottled(t, "app-operator-user"), tokenOf(elector.Token{Epoch: 1,
		Lease: types.NamespacedName{Namespace: ns, Name: appLease}, Holder: "app-operator"}))
	kcm := round11Unthrottled(t, controller)
	if err := retryRBAC(t, "the controller's status", func() error {
		return kcm.Status().Patch(t.Context(), &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"observedGeneration":1}}`)))
	}); err != nil {
		t.Fatalf("the controller's first status write: %v", round9Short(err))
	}
	var seq atomic.Int64
	seq.Store(1)
	admitted, firstErr, stop := round11Storm(t, 4, func(ctx context.Context, _, _ int) error {
		return kcm.Status().Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"observedGeneration":%d}}`, seq.Add(1))))
	})
	testenv.Eventually(t, "the storm", func() (bool, string) { return admitted.Load() > 20, fmt.Sprint(admitted.Load(), firstErr()) })
	// Each attempt as the holder saw it: when it read, the hold it read and the time the apiserver recorded
	// on the token's managedFields entry (which MaxClusterControllerHold counts from), and its answer.
	var timeline []string
	start := time.Now()
	failed, conflicts, first, took := round11CAS(t, 5, func(ctx context.Context, i int) error {
		d := read()
		readAt := time.Since(start)
		var armed time.Time
		for _, e := range d.ManagedFields {
			if e.Manager == (elector.Token{Epoch: 1}).FieldManager() && e.Time != nil && e.Time.After(armed) {
				armed = e.Time.Time
			}
		}
		d.Spec.Replicas = ptr.To(int32(i + 1))
		err := hc.Update(ctx, d)
		timeline = append(timeline, fmt.Sprintf("update %d: read at %v (hold %q, token entry written %v before the read), answered after %v: %s",
			i, readAt.Round(time.Millisecond), d.Annotations[fencingv1alpha1.HoldAtEpochAnnotation], start.Add(readAt).Sub(armed).Round(time.Second),
			(time.Since(start)-readAt).Round(time.Millisecond), testenv.ErrString(err)))
		return err
	})
	stop()
	got := read()
	t.Logf("storm: %d status writes admitted (first refusal %q); the holder's 5 CAS updates: %d failed, %d conflicts, %v; replicas now %d, hold %q",
		admitted.Load(), firstErr(), failed, conflicts, took.Round(time.Millisecond), ptr.Deref(got.Spec.Replicas, 0), got.Annotations[fencingv1alpha1.HoldAtEpochAnnotation])
	if failed > 0 {
		t.Errorf("a controller's tokenless status storm failed %d of the holder's 5 compare-and-swap updates (I2): %s\n%s", failed, first, strings.Join(timeline, "\n"))
	}
}

// TestRound11QuotaChargesStarveTheHoldersCAS: persona: a namespace editor with RBAC to create Secrets (no
// policy declares them, no token, no controller credential). Route: creates of Secrets, which the
// apiserver's ResourceQuota admission charges by writing status.used of the holder's covered ResourceQuota
// as system:apiserver (a cluster controller: its status writes are free and never held). Invariant I2: the
// editor drives tokenless writes of the holder's object at the rate it creates Secrets; the holder's
// compare-and-swap updates of its ResourceQuota (fenced client, retried on conflict as above) must all
// succeed.
func TestRound11QuotaChargesStarveTheHoldersCAS(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const rqc = "system:serviceaccount:kube-system:resourcequota-controller"
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User)
	env.Grant(t, ns, "quotas", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"resourcequotas", "resourcequotas/status"}, Verbs: []string{"*"}}}, holder.User, rqc)
	env.Grant(t, ns, "secrets", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}}}, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "resourcequotas"})
	tok := holder.Acquire(t, ns, appLease, 1)
	hc := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(tok))
	rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quota"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/secrets": resource.MustParse("100000"), "pods": resource.MustParse("10")}}}
	if err := retryRBAC(t, "the holder's quota", func() error { return hc.Create(ctx, rq) }); err != nil {
		t.Fatal(err)
	}
	if err := retryRBAC(t, "the resourcequota controller's sync", func() error {
		return env.ClientAs(t, rqc).Status().Patch(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quota"}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"hard":{"count/secrets":"100000","pods":"10"},"used":{"count/secrets":"0","pods":"0"}}}`)))
	}); err != nil {
		t.Fatalf("the resourcequota controller's status write: %v", round9Short(err))
	}
	editor := round11Unthrottled(t, "editor")
	if err := retryRBAC(t, "the editor's Secret", func() error {
		return editor.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "s-"}})
	}); err != nil {
		t.Fatalf("the editor's first Secret: %v", round9Short(err))
	}
	admitted, firstErr, stop := round11Storm(t, 4, func(ctx context.Context, _, _ int) error {
		return editor.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "s-"}})
	})
	testenv.Eventually(t, "the storm", func() (bool, string) { return admitted.Load() > 20, fmt.Sprint(admitted.Load(), firstErr()) })
	failed, conflicts, first, took := round11CAS(t, 5, func(ctx context.Context, i int) error {
		q := testenv.Read[corev1.ResourceQuota](t, env.Client, ns, "quota")
		q.Spec.Hard["pods"] = resource.MustParse(fmt.Sprint(10 + i))
		return hc.Update(ctx, q)
	})
	stop()
	q := testenv.Read[corev1.ResourceQuota](t, env.Client, ns, "quota")
	used := q.Status.Used["count/secrets"]
	t.Logf("storm: %d Secrets created (first refusal %q; quota used %s); the holder's 5 CAS updates: %d failed, %d conflicts, %v; hard pods now %s",
		admitted.Load(), firstErr(), used.String(), failed, conflicts, took.Round(time.Millisecond), ptr.To(q.Spec.Hard["pods"]).String())
	if failed > 0 {
		t.Errorf("an editor's Secret creates (quota charges written by the apiserver, tokenless) failed %d of the holder's 5 compare-and-swap updates of its ResourceQuota (I2): %s", failed, first)
	}
}

// TestRound11KubeletStatusStormFailsTheHoldersDelete: persona: a kubelet's credential (system:node:n1,
// group system:nodes; a compromised node). Route: pods/status merge patches of the holder's covered Pod on
// its node (status.message), in a loop from four goroutines. Invariant I2 (Delete is one of the holder's
// writes): the holder's fenced Delete writes the marker, then DELETEs with that write's resourceVersion as
// the precondition, and retries a conflict until fencing.DefaultWriteTimeout; the marker holds tokenless
// writes, but not a cluster controller's. Each of three Deletes must succeed.
func TestRound11KubeletStatusStormFailsTheHoldersDelete(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "n1"
	kubelet := "system:node:" + node
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"*"}}}, holder.User, kubelet)
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	hc := fencing.NewClient(round11Unthrottled(t, holder.User), tokenOf(tok))
	kc := round11Unthrottled(t, kubelet, "system:nodes")
	failed := 0
	var firstFail string
	for p := range 3 {
		name := fmt.Sprintf("web-%d", p)
		pod, _ := round9PodWithMounts(ns, name, node, 1, 0)
		if err := retryRBAC(t, "the holder's Pod", func() error { return hc.Create(ctx, pod) }); err != nil {
			t.Fatalf("the holder creates Pod %s: %v", name, err)
		}
		if err := retryRBAC(t, "the kubelet's status", func() error {
			return kc.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"status":{"message":"start"}}`)))
		}); err != nil {
			t.Fatalf("the kubelet's first status of %s: %v", name, round9Short(err))
		}
		admitted, firstErr, stop := round11Storm(t, 4, func(ctx context.Context, g, i int) error {
			return kc.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"status":{"message":"m-%d-%d"}}`, g, i)))
		})
		testenv.Eventually(t, "the storm", func() (bool, string) { return admitted.Load() > 20, fmt.Sprint(admitted.Load(), firstErr()) })
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		err := hc.Delete(dctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		cancel()
		took := time.Since(start)
		stop()
		got := &corev1.Pod{}
		gerr := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, got)
		t.Logf("Pod %s: %d kubelet status writes admitted (first refusal %q); the holder's Delete after %v: %v; deletionTimestamp %v (%s)",
			name, admitted.Load(), firstErr(), took.Round(time.Millisecond), round9Short(err), got.DeletionTimestamp, testenv.ErrString(gerr))
		if err != nil {
			failed++
			if firstFail == "" {
				firstFail = round9Short(err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("a kubelet's tokenless status storm failed %d of the holder's 3 Deletes of its covered Pods (I2): %s", failed, firstFail)
	}
}

// TestRound11OperatorCredentialsLowerTheCoverageEpoch: persona: the operator's own credentials (the user
// env.Config authenticates as, which the in-process operator runs as and the webhook marks as the
// operator; in a cluster its ServiceAccount token, whose role grants fencingpolicies/status), stolen or
// misused. Route: a merge patch of fencingpolicies/status lowering status.coverageEpoch, which the policy
// webhook lets only the operator write, the object webhook trusts (the copy of the Lease decides a write
// only above it) and the operator recomputes only when the generation changes. The threat model says the
// operator's credentials "can make the webhook refuse but not admit". As TestCoverageIsTheOperators: a
// policy is widened during replica-2's term (coverage epoch 2); replica-1 (the stale holder, same user
// class as any elector) writes at its stale epoch 1 to an object only the widened policy covers, while the
// webhook's copy of the Lease lags at epoch 1. Invariant I1: the stale write must stay refused.
func TestRound11OperatorCredentialsLowerTheCoverageEpoch(t *testing.T) {
	a := startCopyAttack(t)
	ctx := t.Context()
	fenced := map[string]string{"app": "fenced"}
	ns, _, r2, c1 := a.staleHolder(t, fenced, "out", nil)

	a.s.set(true)
	acquireAndFence(t, r2, ns, "l", 2)
	// Replica-1's write of content to the ConfigMap while no policy covers it (admitted without any check):
	// its token's entry then owns content (fencing.HolderWrote), as for any object a holder wrote.
	if err := patchConfigMap(t, c1, ns, "out", `{"data":{"v":"early"}}`); err != nil {
		t.Fatalf("replica-1's write to the uncovered ConfigMap: %v", err)
	}
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	setPolicySelector(t, p, nil)
	covers(t, ns, "out")
	coverageOf(t, ns, "app", 2)
	refusedOnQuorum(t, "replica-1's write at epoch 1 to the newly covered ConfigMap", 1,
		func() error { return patchConfigMap(t, c1, ns, "out", `{"data":{"v":"late"}}`) })

	// The operator's credentials.
	forgeErr := env.Client.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(`{"status":{"coverageEpoch":0}}`)))
	t.Logf("the operator's credentials lower the policy's coverage epoch to 0: %v", round9Short(forgeErr))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	t.Logf("the policy's status now: coverage generation %d (generation %d), coverage epoch %d", p.Status.CoverageGeneration, p.Generation, p.Status.CoverageEpoch)
	admitted := 0
	var last error
	for i := range 20 {
		err := patchConfigMap(t, c1, ns, "out", fmt.Sprintf(`{"data":{"v":"forged-%d"}}`, i))
		if err == nil {
			admitted++
			t.Logf("replica-1's write at epoch 1, try %d: admitted (copy decisions so far %v)", i, leaseReads(t, "objects", "cache"))
			break
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	got := readConfigMap(t, ns, "out")
	t.Logf("ConfigMap out now: data %v, record %q; last refusal: %v", got.Data, got.Annotations[fencingv1alpha1.ObjectEpochAnnotation], round9Short(last))
	if admitted > 0 || strings.HasPrefix(got.Data["v"], "forged") {
		t.Errorf("with the coverage epoch lowered by the operator's credentials, replica-1's write at stale epoch 1 was admitted (I1): data %v", got.Data)
	}
	a.s.set(false)
}

// round11FenceTime sets up namespace ns with a policy over ConfigMaps labelled app=fenced and a holder that
// applies five such ConfigMaps at epoch 1; pad(ns) runs; it returns the time fence-on-acquire takes at
// epoch 2, and the time of ten tokenless creates of ConfigMaps no policy covers (the object webhook
// is called for every ConfigMap of the namespace).
func round11FenceTime(t *testing.T, pad func(ns string)) (fence, uncovered time.Duration, err error) {
	t.Helper()
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "gitops")
	grantPolicies(t, ns, holder.User)
	env.Grant(t, ns, "gitops-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"*"}}}, "gitops")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	fc := fencing.NewClient(holder.Client, tokenOf(tok))
	for i := range 5 {
		name := fmt.Sprintf("cm-%d", i)
		if err := retryRBAC(t, "the holder's ConfigMap", func() error {
			return fc.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "fenced"}},
				Data: map[string]string{"k": "v"}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	if pad != nil {
		pad(ns)
	}
	gitops := env.ClientAs(t, "gitops")
	start := time.Now()
	for i := range 10 {
		if err := retryRBAC(t, "the uncovered ConfigMap", func() error {
			return gitops.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("free-%d", i)}})
		}); err != nil {
			t.Errorf("an uncovered ConfigMap's create: %v", round9Short(err))
		}
	}
	uncovered = time.Since(start)
	fo, ferr := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if ferr != nil {
		t.Fatal(ferr)
	}
	tok2 := holder.Acquire(t, ns, appLease, 2)
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start = time.Now()
	err = fo.Raise(c, tok2)
	return time.Since(start), uncovered, err
}

// TestRound11DuplicatePoliciesMultiplyTheRaise: persona: a namespace admin or GitOps tool with RBAC on
// FencingPolicies (not the holder, no token). Route: creates of FencingPolicies bound to the holder's own
// Lease, each with one entry naming configmaps with the holder's selector (policies of one Lease may
// overlap; a repeat within one policy is refused: "write a second FencingPolicy for the same Lease", the
// first try of this test, with 16 repeated entries, was refused so). Fence-on-acquire
// lists each entry's objects and raises every holder-written object once per listing, unbudgeted
// (raiseAll), with two writes when the record already is the new epoch. Invariant I3 (the work and time of
// an acquisition do not grow with what non-holders create; the number of holder-written objects sets it):
// fence-on-acquire over the holder's five ConfigMaps must take no more than twice the time without the
// extra policies plus one second.
func TestRound11DuplicatePoliciesMultiplyTheRaise(t *testing.T) {
	operatortest.Start(t, env)
	base, _, err := round11FenceTime(t, nil)
	t.Logf("control (one policy, one entry): fence %v (err %v)", base.Round(time.Millisecond), err)
	const k = 100
	created := 0
	var firstErr error
	padded, _, err := round11FenceTime(t, func(ns string) {
		gitops := env.ClientAs(t, "gitops")
		entries := []fencingv1alpha1.FencedObjects{{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}}}
		for i := range k {
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("dup-%02d", i)},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: entries}}
			if err := retryRBAC(t, "the GitOps tool's policy", func() error { return gitops.Create(t.Context(), p) }); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			created++
		}
		t.Logf("the GitOps tool created %d of %d policies of one repeated entry for lease %s (first refusal: %v)", created, k, appLease, round9Short(firstErr))
	})
	t.Logf("with %d duplicate policies: fence %v (err %v)", created, padded.Round(time.Millisecond), round9Short(err))
	if created > 0 && (err != nil || padded > 2*base+time.Second) {
		t.Errorf("%d policies repeating the holder's entry took fence-on-acquire over five holder-written ConfigMaps from %v to %v (err %v) (I3)", created, base, padded, round9Short(err))
	}
}

// TestRound11ForcedApplyAndDryRunByANonHolder: persona: a namespace editor (RBAC on ConfigMaps, no
// token). Route: server-side apply with force=true of data.keep, a field the holder's apply entry owns, as
// field manager "editor", first as a dry run (dryRun=All), then for real; and the same apply without
// changing the value (co-ownership: the holder's next apply that drops keep would then leave it).
// Invariant I1 (content and ownership change only with the token): every one must be refused, and the
// holder's next apply without keep must remove it.
func TestRound11ForcedApplyAndDryRunByANonHolder(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder, tok := configMapHolder(t, ns, "editor")
	fc := fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's apply", func() error {
		return fc.Apply(ctx, configMapApply(ns, "app", "1"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := fc.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"keep": "1", "other": "1"})); err != nil {
		t.Fatal(err)
	}
	editor := env.ClientAs(t, "editor")
	apply := func(value string, opts ...client.ApplyOption) error {
		return editor.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"keep": value}),
			append(opts, client.FieldOwner("editor"))...)
	}
	attempts := []struct {
		what string
		err  error
	}{
		{"forced apply of keep=2, dry run", apply("2", client.ForceOwnership, client.DryRunAll)},
		{"forced apply of keep=2", apply("2", client.ForceOwnership)},
		{"apply of keep=1 (same value: shared ownership), dry run", apply("1", client.DryRunAll)},
		{"apply of keep=1 (same value: shared ownership)", apply("1")},
	}
	for _, a := range attempts {
		t.Logf("the editor's %s: %v", a.what, round9Short(a.err))
		if a.err == nil {
			t.Errorf("the editor's %s was admitted without a token (I1)", a.what)
		}
	}
	if err := fc.Apply(ctx, corev1ac.ConfigMap("app", ns).WithData(map[string]string{"other": "2"})); err != nil {
		t.Fatalf("the holder's apply without keep: %v", err)
	}
	got := readConfigMap(t, ns, "app")
	t.Logf("after the holder's apply without keep: data %v", got.Data)
	if _, ok := got.Data["keep"]; ok {
		t.Errorf("the holder's apply without keep left it: data %v (I1: ownership)", got.Data)
	}
}

// TestRound11OperatorCredentialsPrepositionTheCoverageGeneration: persona: the operator's own credentials,
// as TestRound11OperatorCredentialsLowerTheCoverageEpoch, but acting before the change, not after it.
// Route: a merge patch of fencingpolicies/status setting status.coverageGeneration to the policy's next
// generation (coverageEpoch left at 0), made while nothing happens; then an admin widens the policy during
// replica-2's term (a legitimate change): the operator recomputes the coverage epoch only when
// coverageGeneration differs from the generation, so the forged value stands for the new generation.
// Invariant I1: replica-1's write at its stale epoch 1 (webhook copy lagging at epoch 1) to an object only
// the widened policy covers must stay refused.
func TestRound11OperatorCredentialsPrepositionTheCoverageGeneration(t *testing.T) {
	a := startCopyAttack(t)
	ctx := t.Context()
	fenced := map[string]string{"app": "fenced"}
	ns, _, r2, c1 := a.staleHolder(t, fenced, "out", nil)
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	forge := fmt.Sprintf(`{"status":{"coverageGeneration":%d,"coverageEpoch":0}}`, p.Generation+1)
	forgeErr := env.Client.Status().Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(forge)))
	t.Logf("the operator's credentials set the coverage generation to %d (generation %d): %v", p.Generation+1, p.Generation, round9Short(forgeErr))

	a.s.set(true)
	acquireAndFence(t, r2, ns, "l", 2)
	if err := patchConfigMap(t, c1, ns, "out", `{"data":{"v":"early"}}`); err != nil {
		t.Fatalf("replica-1's write to the uncovered ConfigMap: %v", err)
	}
	setPolicySelector(t, p, nil)
	covers(t, ns, "out")
	time.Sleep(2 * time.Second) // the operator's reconcile of the new generation
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	t.Logf("after the widening: generation %d, coverage generation %d, coverage epoch %d", p.Generation, p.Status.CoverageGeneration, p.Status.CoverageEpoch)
	admitted := 0
	var last error
	for i := range 20 {
		err := patchConfigMap(t, c1, ns, "out", fmt.Sprintf(`{"data":{"v":"forged-%d"}}`, i))
		if err == nil {
			admitted++
			t.Logf("replica-1's write at epoch 1, try %d: admitted (copy decisions so far %v)", i, leaseReads(t, "objects", "cache"))
			break
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	got := readConfigMap(t, ns, "out")
	t.Logf("ConfigMap out now: data %v, record %q; last refusal: %v", got.Data, got.Annotations[fencingv1alpha1.ObjectEpochAnnotation], round9Short(last))
	if admitted > 0 || strings.HasPrefix(got.Data["v"], "forged") {
		t.Errorf("with the coverage generation pre-positioned by the operator's credentials, replica-1's write at stale epoch 1 was admitted after the widening (I1): data %v", got.Data)
	}
	a.s.set(false)
}

// TestRound11KubeletRelabelsThroughPodStatus: persona: a kubelet's credential (system:node:n1, group
// system:nodes). Route: pods/status, whose strategy keeps the request's labels and annotations (only spec,
// ownerReferences and deletionTimestamp are reset), and which is free for kubelets as far as status goes:
// a merge patch through pods/status that changes status.message and moves the holder's covered Pod's
// label app=fenced to app=other (out of the policy's selector: coverage), and one that adds an annotation.
// Invariant I1 (coverage and content change only with the token): both must be refused, and the Pod must
// keep its label.
func TestRound11KubeletRelabelsThroughPodStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const node = "n1"
	kubelet := "system:node:" + node
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/status"}, Verbs: []string{"*"}}}, holder.User, kubelet)
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"},
		fencingv1alpha1.FencedObjects{Resource: "pods", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	hc := fencing.NewClient(holder.Client, tokenOf(tok))
	pod, _ := round9PodWithMounts(ns, "web", node, 1, 0)
	pod.Labels = map[string]string{"app": "fenced"}
	if err := retryRBAC(t, "the holder's Pod", func() error { return hc.Create(ctx, pod) }); err != nil {
		t.Fatalf("the holder creates Pod web: %v", err)
	}
	kc := env.ClientAs(t, kubelet, "system:nodes")
	status := func(patch string) error {
		return kc.Status().Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}}, client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	if err := retryRBAC(t, "the kubelet's status", func() error { return status(`{"status":{"message":"running"}}`) }); err != nil {
		t.Fatalf("the kubelet's plain status write (control): %v", round9Short(err))
	}
	relabel := status(`{"metadata":{"labels":{"app":"other"}},"status":{"message":"relabel"}}`)
	annotate := status(`{"metadata":{"annotations":{"example.com/x":"y"}},"status":{"message":"annotate"}}`)
	got := testenv.Read[corev1.Pod](t, env.Client, ns, "web")
	t.Logf("the kubelet's relabel through pods/status: %v", round9Short(relabel))
	t.Logf("the kubelet's annotation through pods/status: %v", round9Short(annotate))
	t.Logf("Pod web now: labels %v, annotations %v, message %q", got.Labels, got.Annotations, got.Status.Message)
	if relabel == nil || got.Labels["app"] != "fenced" {
		t.Errorf("a kubelet moved the holder's covered Pod out of the policy through pods/status (I1): %v, labels %v", relabel, got.Labels)
	}
	if annotate == nil || got.Annotations["example.com/x"] != "" {
		t.Errorf("a kubelet annotated the holder's covered Pod through pods/status (I1): %v", annotate)
	}
}

// TestRound11DeleteCollectionByAnEditor: persona: a namespace editor (RBAC on ConfigMaps, deletecollection
// included; no token). Route: one DELETE of the collection of the namespace's ConfigMaps (a label
// selector matching both the holder's covered ConfigMaps and the editor's own uncovered ones), and a
// create with generateName of a ConfigMap labelled into the policy's selector. Invariant I1/I4 (a fenced
// object's deletion and creation need the holder): the holder's three ConfigMaps must survive, and the
// create must be refused.
func TestRound11DeleteCollectionByAnEditor(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	hc := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	for i := range 3 {
		if err := retryRBAC(t, "the holder's ConfigMap", func() error {
			return hc.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("held-%d", i),
				Labels: map[string]string{"app": "fenced", "sweep": "yes"}}, Data: map[string]string{"k": "v"}})
		}); err != nil {
			t.Fatal(err)
		}
		if err := retryRBAC(t, "the editor's ConfigMap", func() error {
			return editor.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("free-%d", i),
				Labels: map[string]string{"sweep": "yes"}}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	derr := editor.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{"sweep": "yes"})
	t.Logf("the editor's deletecollection: %v", round9Short(derr))
	cerr := editor.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "gen-", Labels: map[string]string{"app": "fenced"}},
		Data: map[string]string{"k": "forged"}})
	t.Logf("the editor's generateName create into the selector: %v", round9Short(cerr))
	var list corev1.ConfigMapList
	if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	held := 0
	for _, cm := range list.Items {
		names = append(names, cm.Name)
		if strings.HasPrefix(cm.Name, "held-") && cm.DeletionTimestamp == nil {
			held++
		}
	}
	t.Logf("ConfigMaps left: %v", names)
	if held != 3 {
		t.Errorf("a tokenless deletecollection deleted %d of the holder's 3 covered ConfigMaps (I1/I4)", 3-held)
	}
	if cerr == nil {
		t.Errorf("a tokenless generateName create of a covered ConfigMap was admitted (I1)")
	}
}
