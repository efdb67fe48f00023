package admission_test

// The six attempts of round 12 of the independent attacker (decision 0049) that worked, closed since
// (decisions 0049 and 0050); the three that held are in independent_round12_test.go (-tags openholes). Each
// asserts the invariant it tries to break.

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round12Exists reports whether obj (namespace/name of its type) is still served, and whether it is being
// deleted.
func round12Exists(t *testing.T, obj client.Object) (exists, deleting bool) {
	t.Helper()
	err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		return false, false
	case err != nil:
		t.Fatal(err)
	}
	return true, obj.GetDeletionTimestamp() != nil
}

// round11PadLeaseEntry returns a managedFields fieldsV1 set owning n annotations the Lease does not have.
func round11PadLeaseEntry(n int) string {
	var b strings.Builder
	b.WriteString(`{"f:metadata":{"f:annotations":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"f:example.com/pad-%07d":{}`, i)
	}
	b.WriteString(`}}}`)
	return b.String()
}

// TestRound12GarbageCollectorDeletesOwnerlessFencedObjects: persona: the garbage collector's identity
// (system:serviceaccount:kube-system:generic-garbage-collector; a stolen token of kube-controller-manager's
// ServiceAccount, or a controller that misbehaves). Route: a plain DELETE (no options, no precondition) of
// the live holder's FencedResource holding data and of its covered ConfigMap, neither of which has any owner
// reference. decideDelete admits every DELETE of that user "because owner references are fenced, so the
// owners whose absence makes it delete are the holder's"; but an object without owner references is never
// one the collector deletes for an owner. Invariant I1/I4 (deletion semantics are the holder's): while the
// Lease is live, both deletes must be refused.
// Closed since (decision 0049): the collector deletes only objects with owner references.
// Observed (d650cf8): WORKED. Both plain DELETEs by the collector's identity were admitted and both objects
// were gone (the ConfigMap "app" and the FencedResource "orders" holding data, neither with an owner
// reference, Lease live at epoch 2). decideDelete admits every DELETE of GarbageCollectorUser (or
// system:kube-controller-manager) before looking at the object.
func TestRound12GarbageCollectorDeletesOwnerlessFencedObjects(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const gc = "system:serviceaccount:kube-system:generic-garbage-collector"
	holder, _ := configMapHolder(t, ns)
	holder.LeaseDuration = 10 * time.Minute
	tok := holder.Acquire(t, ns, appLease, 2)
	grantFencedResources(t, ns, holder.User, gc)
	env.Grant(t, ns, "gc-configmaps", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}, gc)
	fc := fencing.NewClient(holder.Client, tokenOf(tok))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"v": "holder"}}
	if err := retryRBAC(t, "the holder's ConfigMap", func() error { return fc.Create(ctx, cm) }); err != nil {
		t.Fatal(err)
	}
	key := declare(t, ns, "orders", appLease)
	if _, err := retryRBACValue(t, "the holder's FencedResource", func() (*fencingv1alpha1.FencedResource, error) {
		return fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"v": "holder"})
	}); err != nil {
		t.Fatal(err)
	}
	gcc := env.ClientAs(t, gc)
	errCM := retryRBAC(t, "the collector's delete of the ConfigMap", func() error {
		return gcc.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
	})
	errFR := retryRBAC(t, "the collector's delete of the FencedResource", func() error {
		return gcc.Delete(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}})
	})
	cmExists, _ := round12Exists(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
	frExists, _ := round12Exists(t, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}})
	t.Logf("the collector's DELETE of the ownerless ConfigMap: %v (exists after: %v); of the ownerless FencedResource: %v (exists after: %v)",
		round9Short(errCM), cmExists, round9Short(errFR), frExists)
	if errCM == nil || !cmExists {
		t.Errorf("the garbage collector's identity deleted the live holder's covered ConfigMap, which has no owner reference (I1/I4)")
	}
	if errFR == nil || !frExists {
		t.Errorf("the garbage collector's identity deleted the live holder's FencedResource, which has no owner reference (I1/I4)")
	}
}

// TestRound12PodControllerDeletesAStandalonePod: persona: a Pod-deleting controller's identity
// (system:serviceaccount:kube-system:replicaset-controller, and the single credential
// system:kube-controller-manager; a stolen token). Route: a plain DELETE of the live holder's covered Pod,
// which the holder created itself (no owner references: no ReplicaSet, Job or node controller owns it).
// decideDelete admits every Pod delete of the controllers that delete Pods "in their work"; but the
// ReplicaSet controller deletes only the Pods of its ReplicaSets. Invariant I1/I4 (deletion of a fenced
// object is the holder's): both deletes must be refused while the Lease is live.
// Closed since (decision 0050): a Pod-deleting controller deletes only the Pods its workload controls or a
// node runs; only the scheduler and kubelets bind Pods to nodes.
// Observed (d650cf8): WORKED. replicaset-controller's and system:kube-controller-manager's DELETEs of the
// holder's standalone covered Pods were admitted; both Pods were gone (decideDelete: Kind Pod &&
// User.deletesPods(), no look at ownerReferences, nodeName or phase).
func TestRound12PodControllerDeletesAStandalonePod(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const rsc, kcm = "system:serviceaccount:kube-system:replicaset-controller", "system:kube-controller-manager"
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	env.Grant(t, ns, "pods", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}}}, holder.User, rsc, kcm)
	grantObjects(t, ns, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"}, fencingv1alpha1.FencedObjects{Resource: "pods"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fc := fencing.NewClient(holder.Client, tokenOf(tok))
	for _, name := range []string{"p-rsc", "p-kcm"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if err := retryRBAC(t, "the holder's Pod", func() error { return fc.Create(ctx, pod) }); err != nil {
			t.Fatal(err)
		}
	}
	for user, name := range map[string]string{rsc: "p-rsc", kcm: "p-kcm"} {
		c := env.ClientAs(t, user)
		err := retryRBAC(t, user+"'s delete", func() error {
			return c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		})
		exists, deleting := round12Exists(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		t.Logf("%s's DELETE of the holder's standalone Pod %s: %v (exists after: %v, being deleted: %v)", user, name, round9Short(err), exists, deleting)
		if err == nil || !exists || deleting {
			t.Errorf("%s deleted the live holder's covered Pod %s, which no controller owns (I1/I4)", user, name)
		}
	}
}

// TestRound12PaddingRidesAnAcquisition: persona: another workload's user with the fencekit-elector role (an
// "intruder": it may acquire any fenced Lease at the next epoch in its own name, as the threat model
// allows). Route: the intruder's acquisition of the holder's Lease at epoch 2 (an Update presenting
// fencing.fencekit.io/epoch=2, exactly as pkg/elector writes it) that also sends one more managedFields
// entry, "pad", owning 40,000 annotations the Lease does not have; the intruder then releases, and the
// holder acquires again at epoch 3. Decision 0048's Lease webhook bounds the Lease (MaxFreeLeaseBytes,
// 320 KiB, managedFields included) only for writes that neither acquire, renew nor release it: its match
// conditions leave every acquisition to the Lease policy, which cannot measure fieldsV1. The padding outlives
// the intruder's term. Invariants I2 and I3 (nothing a non-holder does makes the holder's renewals and
// acquisitions slower or fail: decision 0048's premise): after the holder's acquisition at epoch 3 the
// Lease must be within MaxFreeLeaseBytes, and ten renewals must take no more than twice the unpadded time
// plus one second.
// Closed since (decision 0050): an acquisition resets the Lease's managedFields (pkg/elector, and
// testenv's Worker.Acquire as it mirrors the elector).
// Observed (d650cf8): WORKED (the size; the timing held on a quiet machine). The intruder's padded
// acquisition was admitted (the Lease webhook never sees it); after the intruder's release and the holder's
// acquisition at epoch 3 the Lease was 1,241,322 bytes (control 1,145; bound 327,680). Ten renewals took
// 2.76 s (control 3.18 s): decision 0045 measured the slowdown only under load.
func TestRound12PaddingRidesAnAcquisition(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	waitForLeaseWebhook(t)
	run := func(what string, pad int) (time.Duration, int, error) {
		ns := env.Namespace(t)
		holder, intruder := newWorker(t, ns, "holder"), newWorker(t, ns, "intruder")
		holder.LeaseDuration = 10 * time.Minute
		holder.Release(t, holder.Acquire(t, ns, "l", 1))
		var padErr error
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var l coordinationv1.Lease
			if err := intruder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "l"}, &l); err != nil {
				return err
			}
			testenv.AcquiredBy(&l, intruder.User, intruder.Holder, 2, 15*time.Second)
			if pad > 0 {
				now := metav1.Now()
				l.ManagedFields = append(l.ManagedFields, metav1.ManagedFieldsEntry{Manager: "pad", Operation: metav1.ManagedFieldsOperationUpdate,
					APIVersion: "coordination.k8s.io/v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(round11PadLeaseEntry(pad))})
			}
			padErr = intruder.Client.Update(ctx, &l, testenv.Presenting(2))
			return padErr
		}); err != nil {
			return 0, 0, err
		}
		tok2 := elector.Token{Epoch: 2, Lease: types.NamespacedName{Namespace: ns, Name: "l"}, Holder: intruder.Holder}
		intruder.Release(t, tok2)
		tok3 := holder.Acquire(t, ns, "l", 3)
		size := len(mustJSON(t, env.ReadLease(t, ns, "l")))
		start := time.Now()
		for range 10 {
			holder.Renew(t, tok3)
		}
		took := time.Since(start)
		t.Logf("%s: the holder's Lease after its acquisition at epoch 3 is %d bytes; 10 renewals took %v", what, size, took.Round(time.Millisecond))
		return took, size, nil
	}
	base, baseSize, err := run("control (the intruder acquires without padding)", 0)
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	padded, size, err := run("attack (the intruder's acquisition sends a 40,000-annotation managedFields entry)", 40000)
	t.Logf("the intruder's padded acquisition: %v; Lease %d -> %d bytes, renewals %v -> %v", round9Short(err), baseSize, size,
		base.Round(time.Millisecond), padded.Round(time.Millisecond))
	if err != nil {
		return
	}
	if size > admission.MaxFreeLeaseBytes {
		t.Errorf("another elector-role user's acquisition left %d bytes of managedFields padding on the holder's fenced Lease (bound %d for every other write): it outlives its term (I2/I3)", size, admission.MaxFreeLeaseBytes)
	}
	if padded > 2*base+time.Second {
		t.Errorf("the padding slowed the holder's 10 renewals from %v to %v (I2)", base, padded)
	}
}

// round12FenceRequests holds five ConfigMaps of the holder's in a namespace of their own (one policy,
// selector app=fenced), runs pad (as the GitOps tool, which may write FencingPolicies), then runs
// fence-on-acquire for objects at epoch 2 and counts its requests by verb ("LIST" for a GET of a
// collection).
func round12FenceRequests(t *testing.T, pad func(ns string)) (requests map[string]int, took time.Duration, err error) {
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
	var mu sync.Mutex
	requests = map[string]int{}
	cfg := rest.CopyConfig(holder.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			verb := r.Method
			if verb == http.MethodGet && (strings.HasSuffix(r.URL.Path, "/configmaps") || strings.HasSuffix(r.URL.Path, "/fencingpolicies")) {
				verb = "LIST"
			}
			mu.Lock()
			requests[verb]++
			mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	fo, err := fencing.FenceObjectsOnAcquireForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tok2 := holder.Acquire(t, ns, appLease, 2)
	start := time.Now()
	err = fo.Raise(ctx, tok2)
	took = time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	return maps.Clone(requests), took, err
}

// TestRound12DistinctEntriesMultiplyTheLists: persona: a namespace admin or GitOps tool with RBAC on
// FencingPolicies (not the holder, no token). Route: creates of FencingPolicies bound to the holder's own
// Lease (policies of one Lease may overlap, and the policy webhook checks overlap only against other
// Leases), each with one configmaps entry whose selector is written differently (matchExpressions app In
// [fenced, pad-i]) but matches exactly the holder's ConfigMaps. Invariant I3 (the work of an acquisition
// does not grow with what non-holders create): fence-on-acquire sends as many requests with the extra
// policies as without them.
// Closed since (decision 0050): fence-on-acquire lists each resource once, whatever selectors the policies
// give it, and matches the selectors itself.
// Observed (d650cf8): WORKED. Fence-on-acquire listed the holder's objects once per distinctly written
// selector: 238 ms without the policies, 6.33 s with 150 (about 40 ms each: some 250 such policies pass the
// default 10 s PostAcquireTimeout, and every acquisition fails).
func TestRound12DistinctEntriesMultiplyTheLists(t *testing.T) {
	operatortest.Start(t, env)
	base, baseTook, err := round12FenceRequests(t, nil)
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	const k = 40
	padded, paddedTook, err := round12FenceRequests(t, func(ns string) {
		gitops := env.ClientAs(t, "gitops")
		for i := range k {
			p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pad-%03d", i)},
				Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: appLease, Resources: []fencingv1alpha1.FencedObjects{{Resource: "configmaps",
					Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn,
						Values: []string{"fenced", fmt.Sprintf("pad-%03d", i)}}}}}}}}
			if err := retryRBAC(t, "the GitOps tool's policy", func() error { return gitops.Create(t.Context(), p) }); err != nil {
				t.Fatalf("the GitOps tool's policy %s: %v", p.Name, err)
			}
		}
	})
	if err != nil {
		t.Fatalf("with %d more policies: %v", k, err)
	}
	t.Logf("fence-on-acquire over five ConfigMaps: %v in %v with one policy; %v in %v with %d more, each selecting them in other words",
		base, baseTook.Round(time.Millisecond), padded, paddedTook.Round(time.Millisecond), k)
	if !maps.Equal(base, padded) {
		t.Errorf("%d policies whose selectors differ only in text changed fence-on-acquire's requests from %v to %v (I3)", k, base, padded)
	}
}

// TestRound12FreeWritesMergeForeignContentIntoTheBucket: persona: a namespace editor (RBAC on ConfigMaps,
// no token). Route: before any policy covers them, the editor creates twenty ConfigMaps labelled into what a
// FencingPolicy will select, with data (its own field manager, "editor", owns data.k); the policy then
// covers them and the holder's fence-on-acquire raises them within its budget (no holder wrote them:
// fencing.HolderWrote is false). After coverage the editor adds eleven finalizers to each, one merge patch
// and one field manager each (free writes): past ten Update entries the apiserver merges the oldest,
// "editor" with its data.k, into "ancient-changes", which HolderWrote counts as the holder's. residuals.md
// accepts objects "made to look written before coverage", and promises that "once covered, no write without
// the token may add or grow such an entry". Invariant I3 (the work of an acquisition does not grow with what
// non-holders write after coverage: objects no holder wrote stay within the budget): after the editor's
// free writes, none of the twenty may count as written by a holder.
// Closed since (decision 0050): a write without the token may not make an object count as written; the
// editor's write that sets the merge off is refused, naming the entry it would merge.
// Observed (d650cf8): WORKED. After the fence at epoch 1: 0 of 20 count as written; after the editor's
// eleven admitted finalizer writes on each: 20 of 20 (pre-00's managers [ancient-changes tool-10 tool-2 ...
// tool-9]: "editor", with data.k, and the raise's entry were merged into the bucket).
func TestRound12FreeWritesMergeForeignContentIntoTheBucket(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	grantPolicies(t, ns, holder.User)
	editor := env.ClientAs(t, "editor")
	const n = 20
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pre-%02d", i), Labels: map[string]string{"app": "fenced"}},
			Data: map[string]string{"k": "editor's"}}
		if err := retryRBAC(t, "the editor's ConfigMap", func() error { return editor.Create(ctx, cm, client.FieldOwner("editor")) }); err != nil {
			t.Fatal(err)
		}
	}
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	fo, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := retryRBAC(t, "the fence at epoch 1", func() error { return fo.Raise(ctx, tok) }); err != nil {
		t.Fatalf("the fence at epoch 1: %v", err)
	}
	before, total := round8HolderWritten(t, ns)
	t.Logf("after coverage and the fence at epoch 1: %d of %d ConfigMaps count as written by a holder", before, total)
	time.Sleep(1100 * time.Millisecond) // the editor's writes in later seconds than its create and the raise
	refused := 0
	for i := range n {
		if _, err := round12Finalizers(t, editor, ns, fmt.Sprintf("pre-%02d", i)); err != nil {
			refused++
			if i == 0 {
				t.Logf("the editor's finalizer write that would merge its entry: %v", round9Short(err))
			}
		}
	}
	after, total := round8HolderWritten(t, ns)
	cm := readConfigMap(t, ns, "pre-00")
	var managers []string
	for _, e := range cm.ManagedFields {
		managers = append(managers, e.Manager)
	}
	t.Logf("after the editor's finalizer writes (%d of %d objects refused one): %d of %d count as written; pre-00's managers %v", refused, n, after, total, managers)
	if after > before {
		t.Errorf("free writes after coverage made %d ConfigMaps no holder wrote count as holder-written (the apiserver merged the editor's content entry into ancient-changes): every acquisition now raises them in full, outside its budget (I3)", after-before)
	}
}

// TestRound12MergedBucketMakesALeftBehindObjectCopyEligible: the consequence on I1 of
// TestRound12FreeWritesMergeForeignContentIntoTheBucket. Personas: a namespace editor (RBAC on ConfigMaps, no
// token) and a stale replica of the holder's user (replica-1, epoch 1). Route: the editor's ConfigMap x,
// created with data before the policy covered it, is raised to epoch 1 by replica-1's fence (no holder
// wrote it: within the budget). Replica-2 acquires at epoch 2, and its fence leaves x behind (its budget,
// half of PostAcquireTimeout, ran out: played by raising only what a holder wrote), while the webhook's
// copy of the Lease lags at epoch 1. residuals.md: "None of them is decided on the webhook's copy of the
// Lease while it holds no epoch"; x holds epoch 1, but copyEligible also requires fencing.HolderWrote, so the
// stale replica's write at epoch 1 is decided on a quorum read and refused (the control). The editor then
// adds eleven finalizers to x (free writes), and the apiserver merges its data-owning entry into
// ancient-changes: x now counts as written by a holder. Invariant I1 (no write of a stale token is admitted
// after an acquisition): replica-1's write at epoch 1 must stay refused.
// Closed since (decision 0050): the editor's write that would merge its entry is refused, so x never counts
// as written and replica-1's write is decided on a quorum read.
// Observed (d650cf8): WORKED. Control: before the editor's writes, replica-1's write of x at epoch 1 was
// refused on a quorum read ("stale epoch 1: lease l is at epoch 2, held by replica-2"). After the eleven
// free finalizer writes, x counts as holder-written and the same write was admitted on the stalled copy:
// x data map[k:stale], Lease at epoch 2.
func TestRound12MergedBucketMakesALeftBehindObjectCopyEligible(t *testing.T) {
	a := startCopyAttack(t)
	ctx := t.Context()
	fenced := map[string]string{"app": "fenced"}
	ns := a.namespace(t)
	r1, r2 := objectReplicas(t, ns)
	env.Grant(t, ns, "editor-configmaps", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}, "editor")
	editor := env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the editor's ConfigMap", func() error {
		return editor.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x", Labels: fenced},
			Data: map[string]string{"k": "editor's"}}, client.FieldOwner("editor"))
	}); err != nil {
		t.Fatal(err)
	}
	configMapPolicy(t, ns, "l", fenced, r1.User)
	coverageOf(t, ns, "app", 0)
	t1 := acquireAndFence(t, r1, ns, "l", 1)
	c1 := fencing.NewClient(r1.Client, tokenOf(t1))
	createConfigMap(t, c1, ns, "mine", fenced)
	a.seen(t, ns, "l", 1, r1.Holder)
	onCopy(t, "objects", "replica-1's write of its own ConfigMap at epoch 1", func() error {
		return patchConfigMap(t, c1, ns, "mine", `{"data":{"v":"one"}}`)
	})
	t.Logf("x: record %s, counts as holder-written: %v", objectEpoch(t, ns, "x"), round12HolderWrote(t, ns, "x"))

	a.s.set(true) // the copy sees nothing from here on
	t2 := r2.Acquire(t, ns, "l", 2)
	// Replica-2's fence raises every object a holder wrote (mine) and its budget leaves x behind: played by
	// replica-2's own write of mine alone (a fenced write records epoch 2, as the raise does).
	c2 := fencing.NewClient(r2.Client, tokenOf(t2))
	if err := patchConfigMap(t, c2, ns, "mine", `{"data":{"v":"two"}}`); err != nil {
		t.Fatalf("replica-2's write of mine at epoch 2: %v", err)
	}
	control := patchConfigMap(t, c1, ns, "x", `{"data":{"k":"stale-control"}}`)
	t.Logf("control, before the editor's free writes: replica-1's write of x at epoch 1 (x record %s): %v", objectEpoch(t, ns, "x"), round9Short(control))
	if got := objectEpoch(t, ns, "x"); got != "1" {
		t.Fatalf("x holds epoch %s: the scenario needs it left behind at 1", got)
	}
	if control == nil {
		t.Fatalf("control: replica-1's write of x at epoch 1 was admitted after the acquisition of epoch 2 (I1)")
	}
	time.Sleep(1100 * time.Millisecond)
	admitted, refusal := round12Finalizers(t, editor, ns, "x")
	t.Logf("after the editor's finalizer writes (%d admitted, then %v): x counts as holder-written: %v", admitted, round9Short(refusal), round12HolderWrote(t, ns, "x"))
	err := patchConfigMap(t, c1, ns, "x", `{"data":{"k":"stale"}}`)
	got := readConfigMap(t, ns, "x")
	t.Logf("replica-1's write of x at epoch 1, Lease at 2, copy at 1: %v; x data %v", round9Short(err), got.Data)
	if err == nil {
		t.Errorf("a stale write at epoch 1 was admitted after the acquisition of epoch 2, on the copy, to an object the editor's free writes made count as holder-written (I1)")
	}
}

// round12HolderWrote reports whether ConfigMap ns/name counts as written by a holder (fencing.HolderWrote).
func round12HolderWrote(t *testing.T, ns, name string) bool {
	t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(readConfigMap(t, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	return fencing.HolderWrote(&unstructured.Unstructured{Object: u})
}

// round12Finalizers adds eleven finalizers to ConfigMap ns/name as c, one merge patch and one field manager
// each (tool-0..tool-10), as round10Finalizers does, on an object no holder wrote: the write that would make
// the apiserver merge a content-owning entry into ancient-changes must be refused for that (decision 0050),
// and ends the series. It returns how many were admitted and that refusal.
func round12Finalizers(t *testing.T, c client.Client, ns, name string) (admitted int, refusal error) {
	t.Helper()
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	fs := []string{}
	for k := range 11 {
		fs = append(fs, fmt.Sprintf("example.com/f-%d", k))
		patch := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": fs}})
		err := retryRBAC(t, "the editor's finalizer", func() error {
			return c.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fmt.Sprintf("tool-%d", k)))
		})
		switch {
		case err == nil:
			admitted++
		case fencing.IsTokenMissing(err) && strings.Contains(err.Error(), "ancient-changes"):
			return admitted, err
		default:
			t.Fatalf("the editor's finalizer %d on %s: %v", k, name, round9Short(err))
		}
	}
	return admitted, nil
}
