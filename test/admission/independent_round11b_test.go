package admission_test

// Round 11b of the independent attacker (30 minutes): the Lease itself, FencedResources ahead of their Lease,
// the status route, and Leases that only a FencingPolicy binds. Each test asserts the invariant it tries to
// break: it fails while the attack works, and passes once the rule holds.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round11bLeaseState is what the invariants are about on a Lease: epoch, acquirer, holder, the fenced label.
func round11bLeaseState(t *testing.T, ns, name string) string {
	t.Helper()
	l := env.ReadLease(t, ns, name)
	return fmt.Sprintf("epoch=%s acquirer=%s holder=%s fenced=%s fences=%q", l.Annotations[protocol.EpochAnnotation],
		l.Annotations[protocol.AcquirerAnnotation], ptr.Deref(l.Spec.HolderIdentity, ""), l.Labels[protocol.FencedLabel],
		l.Annotations[protocol.FencesAnnotation])
}

// TestRound11bLeaseApplyByAnotherElector: persona: another user with the fencekit-elector role (create,
// update, patch on Leases; no token of this Lease). Routes: server-side apply with force of the holder's
// Lease as it stands (taking ownership of epoch, acquirer, holder and the fenced label), then an apply of
// an empty configuration (which would remove every field it alone owns); a JSON patch whose `test` ops match
// the stored holder and epoch and then replaces the holder; an apply that names the holder's token as its
// field manager and renews; an apply with ?fieldValidation=Ignore carrying an extra epoch annotation key
// spelled with another case. Invariant: the Lease's epoch, holder and acquirer change only by the acquirer
// (identity.md) and I2: the holder's next renewal (an Update) and its writes succeed afterwards.
func TestRound11bLeaseApplyByAnotherElector(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "w1")
	holder.LeaseDuration = 10 * time.Minute
	other := newWorker(t, ns, "w2")
	tok := holder.Acquire(t, ns, appLease, 1)
	before := round11bLeaseState(t, ns, appLease)
	t.Logf("before: %s", before)

	lease := env.ReadLease(t, ns, appLease)
	apply := func(u *unstructured.Unstructured, manager string, opts ...client.PatchOption) error {
		return other.Client.Patch(ctx, u, client.Apply, append([]client.PatchOption{client.FieldOwner(manager), client.ForceOwnership}, opts...)...) //nolint:staticcheck // server-side apply as a raw patch
	}
	full := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": appLease, "namespace": ns,
			"labels":      map[string]any{protocol.FencedLabel: "true"},
			"annotations": map[string]any{protocol.EpochAnnotation: lease.Annotations[protocol.EpochAnnotation], protocol.AcquirerAnnotation: lease.Annotations[protocol.AcquirerAnnotation]}},
		"spec": map[string]any{"holderIdentity": *lease.Spec.HolderIdentity, "leaseDurationSeconds": int64(*lease.Spec.LeaseDurationSeconds),
			"renewTime": lease.Spec.RenewTime.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), "acquireTime": lease.Spec.AcquireTime.UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
			"leaseTransitions": int64(ptr.Deref(lease.Spec.LeaseTransitions, 0))},
	}}
	err := apply(full.DeepCopy(), "intruder")
	t.Logf("w2's forced apply of the Lease as it stands: %v", round9Short(err))
	empty := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": appLease, "namespace": ns}}}
	err = apply(empty, "intruder")
	t.Logf("w2's apply of an empty configuration (drops what it owns alone): %v", round9Short(err))
	t.Logf("after the applies: %s", round11bLeaseState(t, ns, appLease))

	patch := fmt.Sprintf(`[{"op":"test","path":"/spec/holderIdentity","value":"w1"},{"op":"test","path":"/metadata/annotations/%s","value":"1"},{"op":"replace","path":"/spec/holderIdentity","value":"w2"}]`,
		strings.ReplaceAll(protocol.EpochAnnotation, "/", "~1"))
	err = other.Client.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: appLease}}, client.RawPatch(types.JSONPatchType, []byte(patch)), testenv.Presenting(1))
	t.Logf("w2's JSON patch test+replace of the holder, presenting epoch 1: %v", round9Short(err))

	renew := full.DeepCopy()
	_ = unstructured.SetNestedField(renew.Object, time.Now().Add(time.Hour).UTC().Format("2006-01-02T15:04:05.000000Z07:00"), "spec", "renewTime")
	err = apply(renew, protocol.FieldManagerFor(1))
	t.Logf("w2's apply of a renewTime one hour ahead, field manager %s: %v", protocol.FieldManagerFor(1), round9Short(err))

	odd := full.DeepCopy()
	_ = unstructured.SetNestedField(odd.Object, "2", "metadata", "annotations", "Fencing.fencekit.io/epoch")
	_ = unstructured.SetNestedField(odd.Object, "w2", "spec", "holderIdentity")
	err = apply(odd, "intruder", client.FieldValidation("Ignore"))
	t.Logf("w2's apply with fieldValidation=Ignore, holder w2 and a Fencing.fencekit.io/epoch annotation: %v", round9Short(err))

	after := round11bLeaseState(t, ns, appLease)
	t.Logf("after: %s", after)
	if after != before {
		t.Errorf("another elector changed the Lease without acquiring it: before %s, after %s", before, after)
	}
	var lerr error
	func() {
		defer func() {
			if r := recover(); r != nil {
				lerr = fmt.Errorf("%v", r)
			}
		}()
		var l coordinationv1.Lease
		if err := holder.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: appLease}, &l); err != nil {
			lerr = err
			return
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		lerr = holder.Client.Update(ctx, &l, testenv.Presenting(tok.Epoch))
	}()
	if lerr != nil {
		t.Errorf("the holder's renewal (Update at epoch 1) after another elector's applies failed (I2): %v", lerr)
	}
}

// TestRound11bPolicyLeaseDeletedUnderTheHolder: persona: a namespace admin with RBAC to delete Leases (not
// in system:masters nor fencekit:breakglass). Route: one DELETE of the live holder's fenced Lease, bound by
// a FencingPolicy (ConfigMaps) only, and, for comparison, one DELETE of a live fenced Lease bound by a
// FencedResource (the operator's protect finalizer). Invariant I2 (nothing tokenless makes the holder's next
// write fail), and the operator's promise that a Lease that resources are bound to does not disappear: the
// holder's next fenced write after each DELETE must succeed.
func TestRound11bPolicyLeaseDeletedUnderTheHolder(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User)
	env.Grant(t, ns, "lease-deleter", []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
		Verbs: []string{"get", "list", "delete"}}}, "ns-admin")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	hc := fencing.NewClient(holder.Client, tokenOf(tok))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held"}, Data: map[string]string{"k": "v1"}}
	if err := retryRBAC(t, "the holder's ConfigMap", func() error { return hc.Create(ctx, cm) }); err != nil {
		t.Fatal(err)
	}
	// The FencedResource's Lease, for comparison.
	key := declare(t, ns, "orders", "fr-lease")
	frTok := holder.Acquire(t, ns, "fr-lease", 1)
	if _, err := fencing.NewWriter(holder.Client).Set(ctx, frTok, key, map[string]any{"v": "1"}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the FencedResource's Lease is protected", func() (bool, string) {
		l := env.ReadLease(t, ns, "fr-lease")
		return strings.Contains(strings.Join(l.Finalizers, ","), "fencing.fencekit.io/protect"), fmt.Sprint(l.Finalizers)
	})
	t.Logf("finalizers of the policy's Lease %s: %v", appLease, env.ReadLease(t, ns, appLease).Finalizers)

	admin := env.ClientAs(t, "ns-admin")
	for _, name := range []string{appLease, "fr-lease"} {
		err := retryRBAC(t, "the admin's delete of "+name, func() error {
			return admin.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		})
		t.Logf("ns-admin's DELETE of the live fenced Lease %s: %v", name, round9Short(err))
	}
	time.Sleep(time.Second)
	var cmErr error
	for range 3 { // the webhook's copy may lag: the holder's writes are decided on a quorum read in the end
		var cur corev1.ConfigMap
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Data["k"] = "v2"
		if cmErr = hc.Update(ctx, &cur); cmErr == nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	_, frErr := fencing.NewWriter(holder.Client).Set(ctx, frTok, key, map[string]any{"v": "2"})
	t.Logf("the holder's fenced ConfigMap update after the DELETE of its policy's Lease: %v", round9Short(cmErr))
	t.Logf("the holder's Writer.Set after the DELETE of its FencedResource's Lease: %v", round9Short(frErr))
	if cmErr != nil {
		t.Errorf("a namespace admin's DELETE of the live Lease a FencingPolicy binds (no protect finalizer) failed the holder's next write (I2): %v", round9Short(cmErr))
	}
	if frErr != nil {
		t.Errorf("a namespace admin's DELETE of the live Lease a FencedResource binds failed the holder's next write (I2): %v", round9Short(frErr))
	}
}

// TestRound11bFencedResourceAheadOfTheLease: persona: a namespace editor with create, update and patch on
// FencedResources (no token, no Lease). Routes: create with spec.epoch 2^53-1; create with spec.raisedEpoch
// 2^53-1; server-side apply (force, ?fieldValidation=Ignore) creating one with spec.epoch 2^53-1; a merge
// patch of spec.raisedEpoch on a free declaration; a JSON patch of spec.epoch with a `test` op. Invariant I2
// ("epoch was never issued" ahead of the Lease must not lock the holder out) and I1: each is refused, and the
// holder, acquiring the Lease at epoch 1, then writes every one of those names with Writer.Set.
func TestRound11bFencedResourceAheadOfTheLease(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "w1")
	holder.LeaseDuration = 10 * time.Minute
	env.Grant(t, ns, "fr-creator", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedresources"},
		Verbs: []string{"get", "list", "create", "update", "patch"}}}, "editor")
	editor := env.ClientAs(t, "editor")
	const maxEpoch = protocol.MaxEpoch
	fr := func(name string, epoch, raised int64) *fencingv1alpha1.FencedResource {
		f := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "l"}}
		f.Spec.Epoch = epoch
		if raised != 0 {
			f.Spec.RaisedEpoch = raised
		}
		return f
	}
	admitted := 0
	try := func(what string, err error) {
		t.Logf("%s: %v", what, round9Short(err))
		if err == nil {
			admitted++
			t.Errorf("%s was admitted without a token (I1)", what)
		}
	}
	try("create with spec.epoch 2^53-1", retryRBAC(t, "create", func() error { return editor.Create(ctx, fr("ahead-epoch", maxEpoch, 0)) }))
	try("create with spec.raisedEpoch 2^53-1", editor.Create(ctx, fr("ahead-raised", 0, maxEpoch)))
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
		"metadata": map[string]any{"name": "ahead-apply", "namespace": ns},
		"spec":     map[string]any{"leaseName": "l", "epoch": maxEpoch, "raisedEpoch": maxEpoch}}}
	try("forced apply with fieldValidation=Ignore creating spec.epoch 2^53-1", editor.Patch(ctx, u, client.Apply, client.FieldOwner("editor"), client.ForceOwnership, client.FieldValidation("Ignore"))) //nolint:staticcheck // server-side apply as a raw patch
	if err := editor.Create(ctx, fr("declared", 0, 0)); err != nil {
		t.Fatalf("a free declaration: %v", err)
	}
	try("merge patch of spec.raisedEpoch 2^53-1 on a declaration", editor.Patch(ctx, fr("declared", 0, 0), client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"raisedEpoch":%d}}`, maxEpoch)))))
	try("JSON patch test+add of spec.epoch 2^53-1 on a declaration", editor.Patch(ctx, fr("declared", 0, 0), client.RawPatch(types.JSONPatchType,
		[]byte(fmt.Sprintf(`[{"op":"test","path":"/spec/leaseName","value":"l"},{"op":"add","path":"/spec/epoch","value":%d}]`, maxEpoch)))))
	try("merge patch of spec.epoch as the float 9.007199254740991e15", editor.Patch(ctx, fr("declared", 0, 0), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"epoch":9.007199254740991e15}}`))))

	// A create whose epoch is the JSON float 0.0 (the transition rules do not run on a create), then a
	// free label write on it: does a float stored epoch break the holder's next write?
	raw := []byte(fmt.Sprintf(`{"apiVersion":%q,"kind":"FencedResource","metadata":{"name":"float-zero","namespace":%q},"spec":{"leaseName":"l","epoch":0.0,"raisedEpoch":0.0}}`,
		fencingv1alpha1.GroupVersion.String(), ns))
	ferr := editor.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
		"metadata": map[string]any{"name": "float-zero", "namespace": ns}, "spec": map[string]any{"leaseName": "l", "epoch": float64(0), "raisedEpoch": float64(0)}}})
	t.Logf("create with spec.epoch 0.0 (float, free) %s: %v", raw[:0], round9Short(ferr))

	tok := holder.Acquire(t, ns, "l", 1)
	w := fencing.NewWriter(holder.Client)
	if ferr == nil {
		if _, err := w.Set(ctx, tok, types.NamespacedName{Namespace: ns, Name: "float-zero"}, map[string]any{"v": "f"}); err != nil {
			t.Errorf("the holder's Writer.Set of the float-zero declaration failed (I2): %v", round9Short(err))
		}
	}
	for _, name := range []string{"ahead-epoch", "ahead-raised", "ahead-apply", "declared"} {
		var cur fencingv1alpha1.FencedResource
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &cur); apierrors.IsNotFound(err) {
			declare(t, ns, name, "l") // refused above: the holder's admin declares it, as Writer.Set needs
		} else if err == nil {
			t.Logf("%s as stored before the holder's write: epoch %d, raisedEpoch %d", name, cur.Spec.Epoch, cur.Spec.RaisedEpoch)
		}
		got, err := w.Set(ctx, tok, types.NamespacedName{Namespace: ns, Name: name}, map[string]any{"v": name})
		if err != nil {
			t.Errorf("the holder's Writer.Set of %s at epoch 1 after the editor's attempts failed (I2): %v", name, round9Short(err))
			continue
		}
		t.Logf("the holder's Writer.Set of %s: epoch %d", name, got.Spec.Epoch)
	}
	t.Logf("editor writes admitted: %d", admitted)
}

// TestRound11bStatusRouteWithoutTheToken: persona: the stale holder's own credentials (same user, no token:
// a paused replica's plain client) and a namespace editor, both with RBAC on fencedresources/status. Routes:
// the status subresource with a merge patch carrying spec.data, spec.epoch, the writer annotation and a
// label; an update through status that sends metadata.managedFields [{}] (the apiserver's reset of
// managedFields) and one that sends managedFields naming the editor as owner of spec.data; a forced apply
// of spec.data to the status subresource. Invariant I1 (data, epoch, writer and the ownership of spec.data
// stay the holder's) and I2: the holder's next Writer.Set succeeds.
func TestRound11bStatusRouteWithoutTheToken(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "w1")
	holder.LeaseDuration = 10 * time.Minute
	key, tok := holdAndWrite(t, holder, ns, "orders", "l", 1, map[string]any{"v": "holder"})
	env.Grant(t, ns, "fr-status", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedresources", "fencedresources/status"},
		Verbs: []string{"get", "update", "patch"}}}, holder.User, "editor")
	editor := env.ClientAs(t, "editor")
	before := get(t, key)
	mfBefore := round10Managers(t, key)
	t.Logf("before: epoch %d, data %s, writer %q, managers %v", before.Spec.Epoch, before.Spec.Data.Raw, before.Annotations[fencingv1alpha1.WriterAnnotation], mfBefore)

	for _, c := range []struct {
		who string
		c   client.Client
	}{{"the holder's user", holder.Client}, {"the editor", editor}} {
		obj := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
		err := retryRBAC(t, c.who+"'s status patch", func() error {
			return c.c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(
				`{"metadata":{"labels":{"x":"y"},"annotations":{%q:"intruder"}},"spec":{"epoch":0,"data":{"v":"forged"}},"status":{"admittedEpoch":1}}`,
				fencingv1alpha1.WriterAnnotation))))
		})
		t.Logf("%s: status merge patch with spec.data, spec.epoch, the writer: %v", c.who, round9Short(err))

		var cur fencingv1alpha1.FencedResource
		if err := env.Client.Get(ctx, key, &cur); err != nil {
			t.Fatal(err)
		}
		reset := cur.DeepCopy()
		reset.ManagedFields = []metav1.ManagedFieldsEntry{{}}
		err = c.c.Status().Update(ctx, reset)
		t.Logf("%s: status update with managedFields [{}] (reset): %v", c.who, round9Short(err))

		if err := env.Client.Get(ctx, key, &cur); err != nil {
			t.Fatal(err)
		}
		steal := cur.DeepCopy()
		now := metav1.Now()
		steal.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "intruder", Operation: metav1.ManagedFieldsOperationApply, APIVersion: fencingv1alpha1.GroupVersion.String(),
			Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:data":{},"f:epoch":{},"f:leaseName":{}},"f:metadata":{"f:annotations":{"f:` + fencingv1alpha1.WriterAnnotation + `":{}}}}`)}}
		err = c.c.Status().Update(ctx, steal)
		t.Logf("%s: status update whose managedFields name only 'intruder', owning spec.data: %v", c.who, round9Short(err))

		ap := &unstructured.Unstructured{Object: map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
			"metadata": map[string]any{"name": key.Name, "namespace": ns}, "spec": map[string]any{"leaseName": "l", "data": map[string]any{"v": "forged"}},
			"status": map[string]any{"admittedEpoch": int64(1)}}}
		err = c.c.Status().Patch(ctx, ap, client.Apply, client.FieldOwner("intruder"), client.ForceOwnership) //nolint:staticcheck // server-side apply as a raw patch
		t.Logf("%s: forced apply of spec.data to the status subresource: %v", c.who, round9Short(err))
	}

	after := get(t, key)
	mfAfter := round10Managers(t, key)
	t.Logf("after: epoch %d, data %s, writer %q, managers %v", after.Spec.Epoch, after.Spec.Data.Raw, after.Annotations[fencingv1alpha1.WriterAnnotation], mfAfter)
	if string(after.Spec.Data.Raw) != string(before.Spec.Data.Raw) || after.Spec.Epoch != before.Spec.Epoch ||
		after.Annotations[fencingv1alpha1.WriterAnnotation] != before.Annotations[fencingv1alpha1.WriterAnnotation] {
		t.Errorf("a tokenless write through the status route changed the FencedResource's fenced content (I1)")
	}
	hasEpochManager := false
	for _, m := range mfAfter {
		if strings.HasPrefix(m, protocol.FieldManagerPrefix) {
			hasEpochManager = true
		}
	}
	if !hasEpochManager {
		t.Errorf("a tokenless write through the status route removed the holder's epoch manager from managedFields (I1 ownership): %v", mfAfter)
	}
	if _, err := fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"v": "holder-2"}); err != nil {
		t.Errorf("the holder's next Writer.Set failed after the status-route writes (I2): %v", round9Short(err))
	}
}

// TestRound11bLargeUncoveredWritesSlowTheWebhook: persona: a namespace editor (RBAC on ConfigMaps, no token).
// Route: a loop of creates and deletes of large (900 KB) ConfigMaps the policy does NOT cover, in the
// holder's namespace: the per-namespace object webhook matches every ConfigMap there (no object selector),
// so fencekit's webhook decodes each. Invariant I2: the holder's fenced ConfigMap updates during the loop
// all succeed within fencing.DefaultWriteTimeout (failurePolicy Fail must not turn the webhook's load into the
// holder's refusal).
func TestRound11bLargeUncoveredWritesSlowTheWebhook(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	hc := fencing.NewClient(holder.Client, tokenOf(tok))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "held", Labels: map[string]string{"app": "fenced"}}, Data: map[string]string{"k": "0"}}
	if err := retryRBAC(t, "the holder's ConfigMap", func() error { return hc.Create(ctx, cm) }); err != nil {
		t.Fatal(err)
	}
	editor := round11Unthrottled(t, "editor")
	big := strings.Repeat("x", 900*1024)
	var bytesSent atomic.Int64
	admitted, firstErr, stop := round11Storm(t, 4, func(sctx context.Context, g, i int) error {
		name := fmt.Sprintf("big-%d-%d", g, i%3)
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": big}}
		err := editor.Create(sctx, c)
		if apierrors.IsAlreadyExists(err) {
			err = editor.Update(sctx, c)
			if err != nil {
				_ = editor.Delete(sctx, c)
			}
		}
		if err == nil {
			bytesSent.Add(int64(len(big)))
		}
		return err
	})
	time.Sleep(2 * time.Second)
	var mu sync.Mutex
	var slowest time.Duration
	failed, first := 0, ""
	start := time.Now()
	for i := 1; i <= 20; i++ {
		var cur corev1.ConfigMap
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &cur); err != nil {
			t.Fatal(err)
		}
		cur.Data["k"] = strconv.Itoa(i)
		wctx, cancel := context.WithTimeout(ctx, fencing.DefaultWriteTimeout)
		s := time.Now()
		err := hc.Update(wctx, &cur)
		cancel()
		mu.Lock()
		if d := time.Since(s); d > slowest {
			slowest = d
		}
		mu.Unlock()
		if err != nil {
			failed++
			if first == "" {
				first = round9Short(err)
			}
		}
	}
	took := time.Since(start)
	stop()
	t.Logf("editor's large writes admitted: %d (%d MB), first refusal %q", admitted.Load(), bytesSent.Load()>>20, firstErr())
	t.Logf("holder's 20 fenced updates: %d failed (first %q), slowest %s, all in %s", failed, first, slowest.Round(time.Millisecond), took.Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of the holder's 20 fenced updates failed during an editor's loop of large uncovered writes (I2): %s", failed, first)
	}
}

// TestRound11bLabelStormFailsTheRelease: persona: another workload's user with the fencekit-elector role
// (patch on Leases; no token of this Lease). Route: free merge patches of one label of the holder's fenced
// Lease (a value flipping: one entry, within the policy's 64), from 4 goroutines, while the holder's
// pkg/elector (ReleaseOnCancel, the default) is cancelled. The renewal survives such a storm (renewOnTerm's
// JSON patch), the release is an Update on the resourceVersion tried twice. Invariant I2 (nothing tokenless
// makes the holder's next write fail; here its release): the Lease must show no holder once Run returns.
func TestRound11bLabelStormFailsTheRelease(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "w1")
	other := newWorker(t, ns, "w2")
	cs, err := kubernetes.NewForConfig(testenv.LimitedConfig(holder.Config)) // an elector at client-go's default limits
	if err != nil {
		t.Fatal(err)
	}
	// The Lease exists and is fenced before the storm starts (the other user's patches need it).
	holder.Release(t, holder.Acquire(t, ns, appLease, 1))
	oc := round11Unthrottled(t, other.User)
	admitted, firstErr, stop := round11Storm(t, 8, func(sctx context.Context, g, i int) error {
		return oc.Patch(sctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: appLease}},
			client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"storm":"%d-%d"}}}`, g, i))))
	})
	const rounds = 6
	failed := 0
	for k := range rounds {
		led := make(chan elector.Token, 1)
		e, err := elector.New(elector.Config{Client: cs, Namespace: ns, Name: appLease, Identity: holder.Holder,
			OnStartedLeading: func(ctx context.Context, tok elector.Token) {
				led <- tok
				<-ctx.Done()
			}}, elector.WithMetricsRegisterer(prometheus.NewRegistry()))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e.Run(runCtx) }()
		var tok elector.Token
		select {
		case tok = <-led:
		case <-time.After(40 * time.Second):
			cancel()
			<-done //nolint:errcheck // Run ends with the cancellation
			t.Fatalf("round %d: the holder did not lead under the storm", k)
		}
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		cancel()
		<-done //nolint:errcheck // Run ends with the cancellation
		took := time.Since(start)
		l := env.ReadLease(t, ns, appLease)
		h := ptr.Deref(l.Spec.HolderIdentity, "")
		t.Logf("round %d: led at epoch %d; after Run returned (%s): holder %q, epoch %s, duration %d s", k, tok.Epoch, took.Round(time.Millisecond), h,
			l.Annotations[protocol.EpochAnnotation], ptr.Deref(l.Spec.LeaseDurationSeconds, 0))
		if h != "" {
			failed++
			// The Lease stays held until it expires: wait for it, so that the next round acquires.
			time.Sleep(time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0))*time.Second + time.Second)
		}
	}
	n := admitted.Load()
	stop()
	t.Logf("the other user's label writes admitted: %d (first refusal %q); releases that failed: %d of %d", n, firstErr(), failed, rounds)
	if failed > 0 {
		t.Errorf("a storm of free label writes by another elector-role user made %d of the holder's %d releases fail (I2): the Lease stayed held until it expired", failed, rounds)
	}
}
