package admission_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
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

// FencedResources on the real apiserver with the operator's webhook: the holder's writes, and every way
// around the token (another user, another holder, a stale replica of the same user, big integers, an
// unlabelled Lease, a resource ahead of its Lease, a DELETE, the garbage collector) refused.

// holdAndWrite declares FencedResource ns/name bound to Lease lease, has w acquire the Lease at epoch and
// write data with its token (fencing.Writer.Set), and returns the resource's key and w's token.
func holdAndWrite(t *testing.T, w worker, ns, name, lease string, epoch int64, data map[string]any) (types.NamespacedName, elector.Token) {
	t.Helper()
	key := declare(t, ns, name, lease)
	tok := w.Acquire(t, ns, lease, epoch)
	if _, err := fencing.NewWriter(w.Client).Set(t.Context(), tok, key, data); err != nil {
		t.Fatalf("%s's write to FencedResource %s at epoch %d: %v", w.Holder, key, epoch, err)
	}
	return key, tok
}

func data(t *testing.T, fr *fencingv1alpha1.FencedResource) map[string]any {
	t.Helper()
	m := map[string]any{}
	if fr.Spec.Data != nil {
		if err := json.Unmarshal(fr.Spec.Data.Raw, &m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// wantEachRefused makes each write in turn and wants it refused (wantRefused), then calls stored, naming
// the write, to check that the refusal left the stored resource as it was.
func wantEachRefused(t *testing.T, writes []refusal, stored func(after string)) {
	t.Helper()
	for _, w := range writes {
		wantRefused(t, w.write(), w.is, w.msg...)
		stored(w.name)
	}
}

func wantRefused(t *testing.T, err error, is func(error) bool, msg ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("write admitted; want it refused with %q", msg)
	}
	if !is(err) {
		t.Errorf("error %v (reason %q) is not of the expected fencing kind", err, fencing.ReasonOf(err))
	}
	for _, m := range msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not contain %q", err.Error(), m)
		}
	}
}

// TestFencedWrites walks one FencedResource through two holders and every kind of refused write, checking
// after each refusal that the stored data is unchanged.
func TestFencedWrites(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key := declare(t, ns, "orders", "orders-writer")

	// No Lease yet: a write is refused as lease-missing.
	ghost := elector.Token{Epoch: 1, Lease: types.NamespacedName{Namespace: ns, Name: "orders-writer"}, Holder: "worker-a"}
	_, err := fencing.NewWriter(a.Client).Set(ctx, ghost, key, map[string]any{"v": "ghost"})
	wantRefused(t, err, fencing.IsLeaseMissing, "lease orders-writer not found in namespace "+ns, "epoch 1")

	ta := a.Acquire(t, ns, "orders-writer", 5)
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5"}); err != nil {
		t.Fatalf("the holder's write at the current epoch was refused: %v", err)
	}
	want := map[string]any{"v": "a5"}

	steps := []refusal{{
		name: "another user presenting the holder's token",
		write: func() error {
			_, err := fencing.NewWriter(b.Client).Set(ctx, ta, key, map[string]any{"v": "b-copy"})
			return err
		},
		is:  fencing.IsNotHolder,
		msg: []string{`user "worker-b-user" is not the user that acquired lease orders-writer at epoch 5 ("worker-a-user")`},
	}, {
		name: "the holder's user naming another holder",
		write: func() error {
			tok := ta
			tok.Holder = "worker-x"
			_, err := fencing.NewWriter(a.Client).Set(ctx, tok, key, map[string]any{"v": "x"})
			return err
		},
		is:  fencing.IsNotHolder,
		msg: []string{`write names holder "worker-x"`, "lease orders-writer at epoch 5 is held by worker-a"},
	}, {
		name: "an epoch never issued",
		write: func() error {
			tok := ta
			tok.Epoch = 6
			_, err := fencing.NewWriter(a.Client).Set(ctx, tok, key, map[string]any{"v": "a6"})
			return err
		},
		is:  func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonFutureEpoch },
		msg: []string{"epoch 6 was never issued: lease orders-writer is at epoch 5, held by worker-a"},
	}, {
		name: "data over the byte bound",
		write: func() error {
			_, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"blob": strings.Repeat("x", fencingv1alpha1.MaxDataBytes)})
			return err
		},
		// The cause names the field that is too big (not spec.epoch).
		is: func(err error) bool {
			return fencing.ReasonOf(err) == protocol.ReasonInvalid && causeField(err) == "spec.data"
		},
		msg: []string{"FencedResource " + ns + "/orders: spec.data is 262155 bytes, over the bound of 262144 bytes"},
	}}
	wantEachRefused(t, steps, func(after string) {
		if got := data(t, get(t, key)); got["v"] != want["v"] {
			t.Fatalf("after %s: stored data %v, want %v", after, got, want)
		}
	})

	// worker-b takes over at epoch 6; worker-a, who does not know, writes at epoch 5.
	tb := b.Acquire(t, ns, "orders-writer", 6)
	_, err = fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5-late"})
	wantRefused(t, err, fencing.IsStale, "stale epoch 5: lease orders-writer is at epoch 6, held by worker-b")
	if _, err := fencing.NewWriter(b.Client).Set(ctx, tb, key, map[string]any{"v": "b6"}); err != nil {
		t.Fatalf("the new holder's write was refused: %v", err)
	}
	// Now the resource itself stores epoch 6: the CRD's rule refuses epoch 5 before the webhook is asked,
	// and the writer's own check refuses it before sending.
	_, err = fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5-later"})
	wantRefused(t, err, fencing.IsStale, "stale epoch 5")
	// A raw update at epoch 5, read again if the operator's status write comes between the read and it.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		raw := get(t, key)
		raw.Spec.Epoch, raw.Spec.Data.Raw = 5, []byte(`{"v":"a5-raw"}`)
		raw.Annotations[fencingv1alpha1.WriterAnnotation] = "worker-a"
		return a.Client.Update(ctx, raw)
	})
	wantRefused(t, err, fencing.IsStale, "stale epoch 5: this FencedResource has already admitted epoch 6")
	if got := get(t, key); data(t, got)["v"] != "b6" || got.Spec.Epoch != 6 || got.Annotations[fencingv1alpha1.WriterAnnotation] != "worker-b" {
		t.Fatalf("stored %v at epoch %d by %s, want worker-b's b6 at epoch 6", data(t, got), got.Spec.Epoch, got.Annotations[fencingv1alpha1.WriterAnnotation])
	}
}

// TestDeclarationCoexistsWithHolder: declaring is free, and a GitOps tool re-applying its declaration with
// server-side apply neither fights the holder nor erases its data.
func TestDeclarationCoexistsWithHolder(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a := newWorker(t, ns, "worker-a")
	declaration := func(labels map[string]string) *fencingv1alpha1.FencedResource {
		return &fencingv1alpha1.FencedResource{
			TypeMeta:   metav1.TypeMeta{APIVersion: fencingv1alpha1.GroupVersion.String(), Kind: "FencedResource"},
			ObjectMeta: metav1.ObjectMeta{Name: "inventory", Namespace: ns, Labels: labels},
			Spec:       fencingv1alpha1.FencedResourceSpec{LeaseName: "inventory-writer"},
		}
	}
	apply := func(fr *fencingv1alpha1.FencedResource) error {
		// An unstructured apply sends only the fields the tool declares (a typed struct would send epoch 0).
		u := map[string]any{"apiVersion": fr.APIVersion, "kind": fr.Kind,
			"metadata": map[string]any{"name": fr.Name, "namespace": fr.Namespace, "labels": fr.Labels},
			"spec":     map[string]any{"leaseName": fr.Spec.LeaseName}}
		b, err := json.Marshal(u)
		if err != nil {
			return err
		}
		return env.Client.Patch(ctx, fr, client.RawPatch(types.ApplyPatchType, b), client.FieldOwner("gitops"))
	}
	if err := apply(declaration(nil)); err != nil {
		t.Fatalf("declaring with no holder and no lease was refused: %v", err)
	}
	key := types.NamespacedName{Namespace: ns, Name: "inventory"}
	ta := a.Acquire(t, ns, "inventory-writer", 1)
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"sku": "42"}); err != nil {
		t.Fatal(err)
	}
	if err := apply(declaration(map[string]string{"team": "orders"})); err != nil {
		t.Fatalf("re-applying the declaration after the holder wrote was refused: %v", err)
	}
	got := get(t, key)
	if data(t, got)["sku"] != "42" || got.Spec.Epoch != 1 || got.Labels["team"] != "orders" {
		t.Fatalf("after the re-apply: data %v, epoch %d, labels %v; want the holder's data at epoch 1 and the new label", data(t, got), got.Spec.Epoch, got.Labels)
	}
}

// TestWebhookUnavailable: with the webhook down, fenced writes are refused (fail closed), with or without
// a token, and nothing is stored; declarations are refused too, since the apiserver cannot ask.
func TestWebhookUnavailable(t *testing.T) {
	stop := operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a := newWorker(t, ns, "worker-a")
	key, ta := holdAndWrite(t, a, ns, "orders", "orders-writer", 1, map[string]any{"v": 1})
	stop()
	_, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": 2})
	if err == nil {
		t.Fatal("a write was admitted while the webhook was down")
	}
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("want the apiserver's failed-webhook error, got %v", err)
	}
	// A write without a token is refused all the same: nobody can check it.
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
	err = a.Client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"data":{"v":3}}}`)))
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("a write without a token while the webhook is down: want the apiserver's failed-webhook error, got %v", err)
	}
	if got := data(t, get(t, key)); got["v"] != float64(1) {
		t.Fatalf("stored data %v after a refused write, want v=1", got)
	}
}

// TestDelete: while its Lease has a live holder, a FencedResource may be deleted only by the holder's user
// or an admin; once the Lease is released anyone with RBAC may.
func TestDelete(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a := newWorker(t, ns, "worker-a")
	// A user with the right to delete FencedResources (RBAC) who is not the holder.
	env.Grant(t, ns, "deleter", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencedresources"},
		Verbs: []string{"delete"}}}, "gitops")
	gitops := env.ClientAs(t, "gitops")
	key, ta := holdAndWrite(t, a, ns, "orders", "orders-writer", 2, map[string]any{"v": 1})
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}}
	testenv.Eventually(t, "the deleter's RBAC to take effect and the webhook to refuse", func() (bool, string) {
		err := gitops.Delete(ctx, fr.DeepCopy(), client.DryRunAll)
		return fencing.IsNotHolder(err), fmt.Sprint(err)
	})
	err := gitops.Delete(ctx, fr.DeepCopy())
	wantRefused(t, err, fencing.IsNotHolder, "FencedResource "+ns+"/orders is bound to lease orders-writer, held by worker-a at epoch 2: only that holder's user \"worker-a-user\" or an admin (group fencekit:breakglass) may delete it")

	// The holder releases the Lease: now the declaration's owner may remove it.
	a.Release(t, ta)
	if err := gitops.Delete(ctx, fr.DeepCopy()); err != nil {
		t.Fatalf("deleting after the release: %v", err)
	}
}

// causeField is the field of the first cause of the API error err, as a client sees it.
func causeField(err error) string {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil || len(se.Status().Details.Causes) == 0 {
		return ""
	}
	return se.Status().Details.Causes[0].Field
}

// replicas returns two lease contenders that are replicas of one Deployment: one ServiceAccount (the same
// user, "orders-sa"), two holder identities.
func replicas(t *testing.T, ns string) (worker, worker) {
	t.Helper()
	w := newWorker(t, ns, "orders-sa") // user orders-sa-user
	r1, r2 := w, w
	r1.Holder, r2.Holder = "replica-1", "replica-2"
	return r1, r2
}

func mergePatch(t *testing.T, c client.Client, key types.NamespacedName, patch string, opts ...client.PatchOption) error {
	t.Helper()
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	return c.Patch(t.Context(), fr, client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
}

// TestStaleReplicaOfTheSameUser: replica-1 held epoch 1; replica-2 (the same ServiceAccount) took over at
// epoch 2 and wrote. Whatever shape replica-1's late write takes, it inherited the live holder's epoch and
// writer from the stored object before the token moved into the request; now each is refused and the live
// holder's data stays.
func TestStaleReplicaOfTheSameUser(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	r1, r2 := replicas(t, ns)
	other := newWorker(t, ns, "worker-b")
	key, t1 := holdAndWrite(t, r1, ns, "orders", "orders-writer", 1, map[string]any{"v": "r1"})
	t2 := r2.Acquire(t, ns, "orders-writer", 2)
	if err := fencing.FenceOnAcquire(r2.Client).Raise(ctx, t2); err != nil {
		t.Fatalf("replica-2's fence-on-acquire at epoch 2: %v", err)
	}
	if _, err := fencing.NewWriter(r2.Client).Set(ctx, t2, key, map[string]any{"v": "r2"}); err != nil {
		t.Fatalf("replica-2's write at epoch 2: %v", err)
	}

	noToken := []string{"FencedResource " + ns + "/orders: this write changes spec.data but presents no fencing token",
		"fieldManager=fencing.fencekit.io/epoch=<your epoch>"}
	attacks := []refusal{{
		name:  "a plain merge patch of spec.data",
		write: func() error { return mergePatch(t, r1.Client, key, `{"spec":{"data":{"v":"r1-late"}}}`) },
		is:    fencing.IsTokenMissing, msg: noToken,
	}, {
		name: "a read-modify-write Update",
		write: func() error {
			// The operator's status writes may move the resourceVersion between the read and the write.
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				fr := get(t, key)
				fr.Spec.Data.Raw = []byte(`{"v":"r1-rmw"}`)
				return r1.Client.Update(ctx, fr)
			})
		},
		is: fencing.IsTokenMissing, msg: noToken,
	}, {
		name: "a kubectl edit (an Update under kubectl's field manager)",
		write: func() error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				fr := get(t, key)
				fr.Spec.Data.Raw = []byte(`{"v":"r1-edit"}`)
				return r1.Client.Update(ctx, fr, client.FieldOwner("kubectl-edit"))
			})
		},
		is: fencing.IsTokenMissing, msg: []string{`presents no fencing token (field manager "kubectl-edit")`},
	}, {
		// Without force, a key the holder's token owns would conflict first (409): a new key does not.
		name:  "a server-side apply of data only",
		write: func() error { return applyData(t, r1.Client, key, `{"w":"r1-ssa"}`, "orders-worker", false) },
		is:    fencing.IsTokenMissing, msg: []string{`presents no fencing token (field manager "orders-worker")`},
	}, {
		name:  "a forced server-side apply of data only",
		write: func() error { return applyData(t, r1.Client, key, `{"v":"r1-ssa-force"}`, "orders-worker", true) },
		is:    fencing.IsTokenMissing, msg: []string{`presents no fencing token (field manager "orders-worker")`},
	}, {
		name:  "a server-side apply of data only under the old token",
		write: func() error { return applyData(t, r1.Client, key, `{"v":"r1-ssa-token"}`, t1.FieldManager(), true) },
		is:    fencing.IsStale, msg: []string{"FencedResource " + ns + "/orders: stale epoch 1: lease orders-writer is at epoch 2, held by replica-2"},
	}, {
		name: "a merge patch of data only under the old token",
		write: func() error {
			return mergePatch(t, r1.Client, key, `{"spec":{"data":{"v":"r1-token"}}}`, client.FieldOwner(t1.FieldManager()))
		},
		is: fencing.IsStale, msg: []string{"stale epoch 1: lease orders-writer is at epoch 2"},
	}, {
		name: "Writer.Update with the old token",
		write: func() error {
			_, err := fencing.NewWriter(r1.Client).Update(ctx, t1, key, func(d map[string]any) error { d["v"] = "r1-update"; return nil })
			return err
		},
		is: fencing.IsStale, msg: []string{"stale epoch 1"},
	}, {
		name: "another user presenting the current token",
		write: func() error {
			_, err := fencing.NewWriter(other.Client).Set(ctx, t2, key, map[string]any{"v": "copied"})
			return err
		},
		is: fencing.IsNotHolder, msg: []string{`user "worker-b-user" is not the user that acquired lease orders-writer at epoch 2 ("orders-sa-user")`},
	}}
	wantEachRefused(t, attacks, func(after string) {
		if got := get(t, key); data(t, got)["v"] != "r2" || got.Spec.Epoch != 2 {
			t.Fatalf("after %s: stored %v at epoch %d, want replica-2's r2 at epoch 2", after, data(t, got), got.Spec.Epoch)
		}
	})

	// The live holder's writes, each presenting its token, are admitted.
	if _, err := fencing.NewWriter(r2.Client).Update(ctx, t2, key, func(d map[string]any) error { d["n"] = 1; return nil }); err != nil {
		t.Fatalf("replica-2's Writer.Update: %v", err)
	}
	if err := applyData(t, r2.Client, key, `{"v":"r2-ssa","n":1}`, t2.FieldManager(), true); err != nil {
		t.Fatalf("replica-2's server-side apply under its token: %v", err)
	}
	if got := data(t, get(t, key)); got["v"] != "r2-ssa" {
		t.Fatalf("stored %v, want replica-2's apply", got)
	}
	// Declarations stay free: a label needs no token.
	if err := mergePatch(t, other.Client, key, `{"metadata":{"labels":{"team":"orders"}}}`); err != nil {
		t.Fatalf("a label without a token: %v", err)
	}
}

// applyData server-side applies spec.data only (and the identifying fields) under fieldManager.
func applyData(t *testing.T, c client.Client, key types.NamespacedName, data, fieldManager string, force bool) error {
	t.Helper()
	body := fmt.Sprintf(`{"apiVersion":%q,"kind":"FencedResource","metadata":{"name":%q,"namespace":%q},"spec":{"data":%s}}`,
		fencingv1alpha1.GroupVersion.String(), key.Name, key.Namespace, data)
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	opts := []client.PatchOption{client.FieldOwner(fieldManager)}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	return c.Patch(t.Context(), fr, client.RawPatch(types.ApplyPatchType, []byte(body)), opts...)
}

// TestBigIntegers: integers above 2^53 are compared and kept exactly. A non-holder's change of
// 9007199254740993 to 9007199254740992 (equal as float64) is a change, and the holder's Writer.Update of
// another key writes 9007199254740993 back, not 9007199254740992.
func TestBigIntegers(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key, ta := holdAndWrite(t, a, ns, "ledger", "ledger-writer", 1, map[string]any{"n": int64(9007199254740993), "m": 1})
	raw := func() string { return string(get(t, key).Spec.Data.Raw) }
	if got := raw(); !strings.Contains(got, `"n":9007199254740993`) {
		t.Fatalf("stored %s, want n = 9007199254740993", got)
	}

	err := mergePatch(t, b.Client, key, `{"spec":{"data":{"n":9007199254740992}}}`)
	wantRefused(t, err, fencing.IsTokenMissing, "FencedResource "+ns+"/ledger: this write changes spec.data but presents no fencing token")
	if got := raw(); !strings.Contains(got, `"n":9007199254740993`) {
		t.Fatalf("after the refused write: stored %s, want n = 9007199254740993", got)
	}

	if _, err := fencing.NewWriter(a.Client).Update(ctx, ta, key, func(d map[string]any) error {
		if n, ok := d["n"].(json.Number); !ok || n.String() != "9007199254740993" {
			return fmt.Errorf("the mutation sees n = %#v, want json.Number 9007199254740993", d["n"])
		}
		d["m"] = 2
		return nil
	}); err != nil {
		t.Fatalf("the holder's Update of m: %v", err)
	}
	if got := raw(); !strings.Contains(got, `"n":9007199254740993`) || !strings.Contains(got, `"m":2`) {
		t.Fatalf("after the holder's Update of m: stored %s, want n = 9007199254740993 bit-exact and m = 2", got)
	}
}

// TestUnlabelledLease: a Lease without fencing.fencekit.io/fenced=true is not guarded by the Lease policy
// (anyone with RBAC on Leases may write its epoch and acquirer), so a write bound to it is refused.
func TestUnlabelledLease(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	a := newWorker(t, ns, "worker-a")
	key := declare(t, ns, "orders", "plain-lease")
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain-lease"}}
	a.Acquire(t, ns, "plain-lease", 1) // as the elector writes it, then the label removed by an admin
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(lease), lease); err != nil {
		t.Fatal(err)
	}
	delete(lease.Labels, protocol.FencedLabel)
	if err := env.Client.Update(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	tok := elector.Token{Epoch: 1, Lease: client.ObjectKeyFromObject(lease), Holder: "worker-a"}
	_, err := fencing.NewWriter(a.Client).Set(t.Context(), tok, key, map[string]any{"v": 1})
	wantRefused(t, err, fencing.IsLeaseMissing,
		"lease plain-lease cannot fence FencedResource "+ns+"/orders: it lacks the label fencing.fencekit.io/fenced=true")
	if got := get(t, key); got.Spec.Data != nil {
		t.Fatalf("stored data %s after a refused write", got.Spec.Data.Raw)
	}
}

// TestFenceOnAcquireResourceAhead: a resource above the new epoch fails the acquisition, naming the
// resource and both epochs, instead of being skipped (which handed out a token the resource refuses).
func TestFenceOnAcquireResourceAhead(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	key := declare(t, ns, "orders", "orders-writer")
	a.Acquire(t, ns, "orders-writer", 1)
	a.Acquire(t, ns, "orders-writer", 2)
	t3 := a.Acquire(t, ns, "orders-writer", 3)
	if err := fencing.FenceOnAcquire(a.Client).Raise(ctx, t3); err != nil {
		t.Fatal(err)
	}
	// An admin (exempt from the Lease policy) sets the Lease back to epoch 1.
	var lease coordinationv1.Lease
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "orders-writer"}, &lease); err != nil {
		t.Fatal(err)
	}
	lease.Annotations[protocol.EpochAnnotation] = "1"
	if err := env.Client.Update(ctx, &lease); err != nil {
		t.Fatal(err)
	}
	t2 := b.Acquire(t, ns, "orders-writer", 2)
	err := fencing.FenceOnAcquire(b.Client).Raise(ctx, t2)
	want := "FencedResource " + ns + "/orders is at epoch 3, above lease " + ns + "/orders-writer's new epoch 2"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("fence-on-acquire at epoch 2 with a resource at epoch 3: got %v, want %q", err, want)
	}
	if got := get(t, key); got.Spec.FencedEpoch() != 3 {
		t.Fatalf("resource at epoch %d, want 3 untouched", got.Spec.FencedEpoch())
	}
}

// grantFencedResources lets users get, patch and delete FencedResources in ns (RBAC), so that the
// refusals below are the webhook's.
func grantFencedResources(t *testing.T, ns string, users ...string) {
	env.Grant(t, ns, "fr-editor", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencedresources"},
		Verbs: []string{"get", "patch", "update", "delete"}}}, users...)
}

// TestDeleteUnderLiveLease: a DELETE carries no token, so while the Lease is live the holder's user must
// first write the deletion marker at the current epoch. A stale replica of the same user, whose marker
// the new holder's raise removed, or absent, is refused; the live holder's Writer.Delete is admitted.
func TestDeleteUnderLiveLease(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	r1, r2 := replicas(t, ns)
	grantFencedResources(t, ns, r1.User)
	fresh := declare(t, ns, "fresh", "orders-writer")
	key, t1 := holdAndWrite(t, r1, ns, "orders", "orders-writer", 1, map[string]any{"v": "r1"})
	// replica-1 starts a delete: its marker at epoch 1 is written, then it pauses before the DELETE.
	if err := mergePatch(t, r1.Client, key, fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, fencingv1alpha1.DeleteAtEpochAnnotation),
		client.FieldOwner(t1.FieldManager())); err != nil {
		t.Fatalf("replica-1's marker at epoch 1: %v", err)
	}
	t2 := r2.Acquire(t, ns, "orders-writer", 2)
	if err := fencing.FenceOnAcquire(r2.Client).Raise(ctx, t2); err != nil {
		t.Fatal(err)
	}
	fr := func(k types.NamespacedName) *fencingv1alpha1.FencedResource {
		return &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
	}
	testenv.Eventually(t, "the deleter's RBAC to take effect", func() (bool, string) {
		err := r1.Client.Delete(ctx, fr(key), client.DryRunAll)
		return fencing.IsFenced(err), fmt.Sprint(err)
	})
	// replica-2's raise removed replica-1's marker: the bare DELETE carries no token.
	if m := get(t, key).Annotations[fencingv1alpha1.DeleteAtEpochAnnotation]; m != "" {
		t.Errorf("after replica-2's fence the resource still carries replica-1's marker %s=%q", fencingv1alpha1.DeleteAtEpochAnnotation, m)
	}
	err := r1.Client.Delete(ctx, fr(key))
	wantRefused(t, err, fencing.IsTokenMissing, fmt.Sprintf(
		"FencedResource %s/orders is bound to lease orders-writer, held by replica-2 at epoch 2: a DELETE carries no fencing token", ns))
	err = r1.Client.Delete(ctx, fr(fresh))
	wantRefused(t, err, fencing.IsTokenMissing, fmt.Sprintf(
		"FencedResource %s/fresh is bound to lease orders-writer, held by replica-2 at epoch 2: a DELETE carries no fencing token, so the holder first writes the annotation fencing.fencekit.io/delete-at-epoch=2 with its token", ns))
	// A stale Writer.Delete is refused at its marker write.
	wantRefused(t, fencing.NewWriter(r1.Client).Delete(ctx, t1, key), fencing.IsStale, "stale epoch 1")
	get(t, key)

	if err := fencing.NewWriter(r2.Client).Delete(ctx, t2, key); err != nil {
		t.Fatalf("the live holder's Writer.Delete: %v", err)
	}
	if err := env.Client.Get(ctx, key, &fencingv1alpha1.FencedResource{}); err == nil {
		t.Fatal("the resource still exists after the holder's Writer.Delete")
	}
}

// TestGarbageCollectorPath: an owner reference makes the garbage collector delete a FencedResource, so
// adding one needs the token (anyone could otherwise name an owner that does not exist). The garbage
// collector itself may delete under a live Lease and may remove owner references; the namespace controller
// may delete only in a terminating namespace; no other kube-system ServiceAccount is exempt.
// (A real kube-controller-manager is not run: these are its requests, made as its users.)
func TestGarbageCollectorPath(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	a, b := newWorker(t, ns, "worker-a"), newWorker(t, ns, "worker-b")
	const rsController = "system:serviceaccount:kube-system:replicaset-controller"
	grantFencedResources(t, ns, b.User, rsController)
	gc, nsController, rs := env.ClientAs(t, admission.GarbageCollectorUser), env.ClientAs(t, admission.NamespaceControllerUser), env.ClientAs(t, rsController)
	key, ta := holdAndWrite(t, a, ns, "orders", "orders-writer", 1, map[string]any{"v": "a1"})
	ghost := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","name":"ghost","uid":%q}`, "00000000-0000-0000-0000-00000000dead")
	parent := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","name":"parent","uid":%q}`, "00000000-0000-0000-0000-00000000beef")

	testenv.Eventually(t, "worker-b's RBAC to take effect", func() (bool, string) {
		err := mergePatch(t, b.Client, key, `{"metadata":{"ownerReferences":[`+ghost+`]}}`, client.DryRunAll)
		return fencing.IsFenced(err), fmt.Sprint(err)
	})
	err := mergePatch(t, b.Client, key, `{"metadata":{"ownerReferences":[`+ghost+`]}}`)
	wantRefused(t, err, fencing.IsTokenMissing, "FencedResource "+ns+"/orders: this write changes metadata.ownerReferences but presents no fencing token")
	err = mergePatch(t, gc, key, `{"metadata":{"ownerReferences":[`+ghost+`]}}`)
	wantRefused(t, err, fencing.IsTokenMissing, "changes metadata.ownerReferences")
	if got := get(t, key); len(got.OwnerReferences) != 0 {
		t.Fatalf("owner references %v after refused writes", got.OwnerReferences)
	}
	// The holder sets two owners with its token; the garbage collector drops one (orphaning).
	if err := mergePatch(t, a.Client, key, `{"metadata":{"ownerReferences":[`+ghost+`,`+parent+`]}}`, client.FieldOwner(ta.FieldManager())); err != nil {
		t.Fatalf("the holder's owner references: %v", err)
	}
	if err := mergePatch(t, gc, key, `{"metadata":{"ownerReferences":[`+parent+`]}}`); err != nil {
		t.Fatalf("the garbage collector removing an owner reference: %v", err)
	}

	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}
	testenv.Eventually(t, "the replicaset controller's RBAC to take effect", func() (bool, string) {
		err := rs.Delete(ctx, fr.DeepCopy(), client.DryRunAll)
		return fencing.IsFenced(err), fmt.Sprint(err)
	})
	wantRefused(t, rs.Delete(ctx, fr.DeepCopy()), fencing.IsNotHolder, "FencedResource "+ns+"/orders is bound to lease orders-writer, held by worker-a at epoch 1")
	wantRefused(t, nsController.Delete(ctx, fr.DeepCopy()), fencing.IsNotHolder, "FencedResource "+ns+"/orders is bound to lease orders-writer")
	if err := gc.Delete(ctx, fr.DeepCopy(), client.DryRunAll); err != nil {
		t.Fatalf("the garbage collector's delete under a live lease: %v", err)
	}

	// The namespace is deleted: now the namespace controller may empty it.
	if err := env.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := nsController.Delete(ctx, fr.DeepCopy(), &client.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatalf("the namespace controller's delete in a terminating namespace: %v", err)
	}
}

// TestOwnerReferencesOnCreate: owner references need the token on a FencedResource's create too. Were
// they free there, an editor could declare one owned by an object it controls, let the holder write data
// into it, then delete the owner: the garbage collector, which is exempt, would delete the holder's data
// while the Lease is live.
func TestOwnerReferencesOnCreate(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	env.Grant(t, ns, "fr-creator", []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencedresources"},
		Verbs: []string{"create"}}}, "editor")
	editor := env.ClientAs(t, "editor")
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owned",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "editors", UID: "00000000-0000-0000-0000-0000000000ee"}}},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "l"}}
	err := retryRBAC(t, "the editor's create", func() error { return editor.Create(ctx, fr.DeepCopy()) })
	mustContain(t, "an editor's create of a FencedResource with an owner", err, fencing.IsTokenMissing, "FencedResource "+ns+"/owned", "metadata.ownerReferences")
}
