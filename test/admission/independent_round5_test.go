package admission_test

// Round 5 of the independent attacker: the attacks on the changes of this round that the code withstood.
// Each test asserts the invariant it tried to break (it fails when the attack works). The attacks that
// worked are in open_holes_round5_test.go (build tag openholes).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round5ObjectHolder holds appLease at epoch 1 under a policy fencing the namespace's ConfigMaps, and
// returns its fenced client and an editor without the token.
func round5ObjectHolder(t *testing.T, ns string) (fenced, editor client.Client) {
	t.Helper()
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	return fencing.NewClient(holder.Client, tokenOf(tok)), env.ClientAs(t, "editor")
}

// round5WithEntries is a merge patch setting metadata.managedFields to mf.
func round5WithEntries(t *testing.T, mf []metav1.ManagedFieldsEntry) string {
	return string(mustJSON(t, map[string]any{"metadata": map[string]any{"managedFields": mf}}))
}

// TestRound5ManagedFieldsEntriesThatDodgeTheCount: freePart skips managedFields entries whose manager
// starts with the token's prefix (the holder's). A user without the token sends metadata.managedFields
// itself: an entry of a made-up manager "fencing.fencekit.io/epoch=x" owning finalizers (it would not be
// counted), the holder's entry under operation Apply (another id), and the holder's entry twice, a copy
// without its data first or last (the apiserver keeps the last of two entries with one id). Each must be
// refused or leave the holder's entry as it was, with no entry of a token manager added (I1 ownership, I3).
func TestRound5ManagedFieldsEntriesThatDodgeTheCount(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	fenced, editor := round5ObjectHolder(t, ns)
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	stored := readConfigMap(t, ns, "cm")
	var mine metav1.ManagedFieldsEntry
	for _, e := range stored.ManagedFields {
		if strings.HasPrefix(e.Manager, "fencing.fencekit.io/epoch=") {
			mine = e
		}
	}
	if mine.Manager == "" {
		t.Fatalf("no entry of the holder: %v", stored.ManagedFields)
	}
	fins := map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{`v:"example.com/a"`: map[string]any{}}}}
	made := metav1.ManagedFieldsEntry{Manager: "fencing.fencekit.io/epoch=x", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Now()}, FieldsType: "FieldsV1", FieldsV1: fieldsV1(mustJSON(t, fins))}
	applied := mine
	applied.Operation = metav1.ManagedFieldsOperationApply
	emptied := mine
	emptied.FieldsV1 = fieldsV1([]byte(`{}`))
	others := func(extra ...metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
		var out []metav1.ManagedFieldsEntry
		for _, e := range readConfigMap(t, ns, "cm").ManagedFields {
			if e.Manager != mine.Manager {
				out = append(out, e)
			}
		}
		return append(out, extra...)
	}
	for _, c := range []struct {
		what string
		mf   []metav1.ManagedFieldsEntry
	}{
		{"an entry of a made-up token manager owning a finalizer", append(others(mine), made)},
		{"the holder's entry under operation Apply", others(mine, applied)},
		{"the holder's entry, then a copy owning nothing", others(mine, emptied)},
		{"a copy owning nothing, then the holder's entry", others(emptied, mine)},
	} {
		err := patchConfigMap(t, editor, ns, "cm", round5WithEntries(t, c.mf))
		got := readConfigMap(t, ns, "cm")
		var tokenEntries []string
		kept := false
		for _, e := range got.ManagedFields {
			if strings.HasPrefix(e.Manager, "fencing.fencekit.io/epoch=") {
				tokenEntries = append(tokenEntries, fmt.Sprintf("%s/%s:%s", e.Manager, e.Operation, e.FieldsV1.GetRawString()))
				kept = kept || (e.Manager == mine.Manager && e.Operation == mine.Operation && e.FieldsV1.GetRawString() == mine.FieldsV1.GetRawString())
			}
		}
		t.Logf("%s: %v; token entries now %v", c.what, err, tokenEntries)
		if len(tokenEntries) != 1 || !kept {
			t.Errorf("%s, by a user without the token: the token managers' entries are now %v (I1 ownership)", c.what, tokenEntries)
		}
	}
}

// TestRound5HolderMetadataPastTheCountBound: the holder writes a ConfigMap with 140 finalizers of its own
// (past MaxFreePartEntries, which only writes without the token are held to). A user without the token
// then adds one more finalizer, and, as a second user, a label-free managedFields entry: each grows the
// count past 128 and must be refused; the holder's next write must go through (I2, I3).
func TestRound5HolderMetadataPastTheCountBound(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	fenced, editor := round5ObjectHolder(t, ns)
	fins := make([]string, 140)
	for i := range fins {
		fins[i] = fmt.Sprintf("example.com/h%03d", i)
	}
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm", Finalizers: fins}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, "cm", `{"metadata":{"finalizers":null}}`) })
	err := patchConfigMap(t, editor, ns, "cm", string(mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": append(slices.Clone(fins), "example.com/x")}})))
	mustContain(t, "a user without the token adds a 141st finalizer", err, nil, "over the bound of 128")
	cm := readConfigMap(t, ns, "cm")
	pad := metav1.ManagedFieldsEntry{Manager: "pad", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &metav1.Time{Time: time.Now()}, FieldsType: "FieldsV1", FieldsV1: fieldsV1([]byte(`{"f:metadata":{"f:finalizers":{"v:\"example.com/h000\"":{}}}}`))}
	err = patchConfigMap(t, editor, ns, "cm", round5WithEntries(t, append(cm.ManagedFields, pad)))
	mustContain(t, "a user without the token adds a managedFields entry to an object past 128 entries", err, nil, "over the bound of 128")
	cm = readConfigMap(t, ns, "cm")
	cm.Data["v"] = "2"
	if err := fenced.Update(ctx, cm); err != nil {
		t.Errorf("the holder's next update: %v", err)
	}
}

// TestRound5ScalePatchOfADeploymentBeingDeleted: NewClient's SubResource("scale") reads the object before
// it writes. The holder deletes its Deployment (held by another user's free finalizer), then scales it
// through NewClient with a merge patch and with an update of a Scale whose body names another object;
// each must be refused before it is sent ("nothing is lost"), and spec.replicas stay 1.
func TestRound5ScalePatchOfADeploymentBeingDeleted(t *testing.T) {
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
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	if err := hc.Delete(ctx, read()); err != nil {
		t.Fatal(err)
	}
	err := hc.SubResource("scale").Patch(ctx, read(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`)))
	mustContain(t, "the holder's merge patch of deployments/scale on its Deployment being deleted", err, nil, "being deleted")
	other := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Spec: autoscalingv1.ScaleSpec{Replicas: 6}}
	err = hc.SubResource("scale").Update(ctx, other, client.WithSubResourceBody(scale))
	mustContain(t, "the holder's update of deployments/scale, from a bare Deployment, on its Deployment being deleted", err, nil, "being deleted")
	if r := *read().Spec.Replicas; r != 1 {
		t.Errorf("spec.replicas of the Deployment being deleted is %d, want 1", r)
	}
}

// TestRound5OneEntryAtATimeByManyManagers: a user without the token adds one finalizer per write, each
// write under another field manager (each adds a managedFields entry too), to a ConfigMap the holder
// wrote, until refused. The count of labels, annotations, finalizers, owner references and entries of
// other managers must never pass 128, a write must be refused before 200, and the holder's next write
// must go through (I2, I3). The apiserver keeps at most 10 Update entries and merges the oldest, the
// holder's among them, into "ancient-changes": the merges are the apiserver's, and admitted.
func TestRound5OneEntryAtATimeByManyManagers(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	fenced, editor := fencing.NewClient(holder.Client, tokenOf(holder.Acquire(t, ns, appLease, 1))), env.ClientAs(t, "editor")
	if err := retryRBAC(t, "the holder's create", func() error {
		return fenced.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"v": "1"}})
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = patchConfigMap(t, env.Client, ns, "cm", `{"metadata":{"finalizers":null}}`) })
	count := func(cm *corev1.ConfigMap) int {
		n := len(cm.Labels) + len(cm.Annotations) + len(cm.Finalizers) + len(cm.OwnerReferences)
		for _, e := range cm.ManagedFields {
			if !strings.HasPrefix(e.Manager, "fencing.fencekit.io/epoch=") {
				n++
			}
		}
		return n
	}
	var err error
	writes := 0
	for i := 0; i < 200 && err == nil; i++ {
		cm := readConfigMap(t, ns, "cm")
		patch := string(mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": append(cm.Finalizers, fmt.Sprintf("example.com/f%03d", i))}}))
		err = editor.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}},
			client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner(fmt.Sprintf("manager-%03d", i)))
		if err == nil {
			writes++
		}
	}
	cm := readConfigMap(t, ns, "cm")
	t.Logf("%d writes admitted, the next: %.250v; the count is %d (%d finalizers, %d entries in all)", writes, err, count(cm), len(cm.Finalizers), len(cm.ManagedFields))
	if count(cm) > 128 {
		t.Errorf("writes without the token, one entry at a time, brought the count to %d, past 128", count(cm))
	}
	if err == nil {
		t.Errorf("200 writes without the token, each adding a finalizer and an entry, were all admitted")
	}
	cm.Data["v"] = "2"
	if err := fenced.Update(ctx, cm); err != nil {
		t.Errorf("the holder's next update: %v", err)
	}
}

// TestRound5LeaseManagedFieldsSlowTheRenewal: the Lease policy bounds a fenced Lease's labels and
// annotations (64, 252 KiB) so that every write, each renewal too, stays cheap, but not its managedFields:
// each server-side apply under another field manager adds an entry, even one that changes no value. Another
// user with RBAC on Leases (the elector role, and patch) applies the same label under as many field
// managers as 20 seconds let it (up to 4000), then the holder renews (a read and an update, as pkg/elector does). The renewal must go
// through, and stay well within the elector's renew deadline (I2). Control: the renewal before.
func TestRound5LeaseManagedFieldsSlowTheRenewal(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	const lease, managers = "mf", 4000
	holder := newWorker(t, ns, "app-operator")
	intruder := newWorker(t, ns, "intruder")
	env.Grant(t, ns, "lease-patch", []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"patch"}}}, intruder.User)
	tok := holder.Acquire(t, ns, lease, 1)
	renew := func(what string) time.Duration {
		start := time.Now()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var cur coordinationv1.Lease
			if err := holder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: lease}, &cur); err != nil {
				return err
			}
			now := metav1.NewMicroTime(time.Now())
			cur.Spec.RenewTime = &now
			return holder.Client.Update(ctx, &cur, testenv.Presenting(tok.Epoch))
		})
		took := time.Since(start)
		t.Logf("%s: the holder's renewal took %v: %.300v", what, took, err)
		if err != nil {
			t.Errorf("%s: the holder's renewal (I2): %.300v", what, err)
		}
		return took
	}
	control := renew("control")
	_, cfg, err := env.UserClient(intruder.User)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	ic, err := client.New(cfg, client.Options{Scheme: env.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(fmt.Sprintf(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":%q,"namespace":%q,"labels":{"example.com/x":"1"}}}`, lease, ns))
	if err := retryRBAC(t, "the intruder's apply", func() error {
		return ic.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease}}, client.RawPatch(types.ApplyPatchType, body), client.FieldOwner("m-first"))
	}); err != nil {
		t.Fatal(err)
	}
	var admitted, failed atomic.Int64
	var firstErr atomic.Value
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	workqueue.ParallelizeUntil(pctx, 8, managers, func(i int) {
		err := ic.Patch(pctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: lease}}, client.RawPatch(types.ApplyPatchType, body),
			client.FieldOwner(fmt.Sprintf("m-%05d", i)))
		if err != nil {
			if failed.Add(1) == 1 {
				firstErr.Store(err.Error())
			}
			return
		}
		admitted.Add(1)
	})
	l := env.ReadLease(t, ns, lease)
	t.Logf("the intruder's applies under up to %d field managers for %v: %d admitted, %d failed (first: %.300v); the Lease has %d managedFields entries, %d bytes",
		managers, time.Since(start), admitted.Load(), failed.Load(), firstErr.Load(), len(l.ManagedFields), len(mustJSON(t, l)))
	took := renew("after the intruder's applies")
	if took > 20*control && took > 2*time.Second {
		t.Errorf("the holder's renewal took %v after the intruder's applies, against %v before (I2: each renewal must stay cheap)", took, control)
	}
}

// fieldsV1 is a managedFields entry's field set from its JSON.
func fieldsV1(raw []byte) *metav1.FieldsV1 {
	f := &metav1.FieldsV1{}
	f.SetRawBytes(raw)
	return f
}
