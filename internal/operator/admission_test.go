package operator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

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

	steps := []struct {
		name  string
		write func() error
		is    func(error) bool
		msg   []string
	}{{
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
		is:  func(err error) bool { return fencing.ReasonOf(err) == fencing.ReasonFutureEpoch },
		msg: []string{"epoch 6 was never issued: lease orders-writer is at epoch 5, held by worker-a"},
	}, {
		name: "data over the byte bound",
		write: func() error {
			_, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"blob": strings.Repeat("x", fencingv1alpha1.MaxDataBytes)})
			return err
		},
		// The cause names the field that is too big (not spec.epoch).
		is: func(err error) bool {
			return fencing.ReasonOf(err) == fencing.ReasonInvalid && causeField(err) == "spec.data"
		},
		msg: []string{"FencedResource " + ns + "/orders: spec.data is 262155 bytes, over the bound of 262144 bytes"},
	}}
	for _, s := range steps {
		wantRefused(t, s.write(), s.is, s.msg...)
		if got := data(t, get(t, key)); got["v"] != want["v"] {
			t.Fatalf("after %s: stored data %v, want %v", s.name, got, want)
		}
	}

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
	raw := get(t, key)
	raw.Spec.Epoch, raw.Spec.Data.Raw = 5, []byte(`{"v":"a5-raw"}`)
	raw.Annotations[fencingv1alpha1.WriterAnnotation] = "worker-a"
	err = a.Client.Update(ctx, raw)
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
		b, _ := json.Marshal(u)
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
	key := declare(t, ns, "orders", "orders-writer")
	ta := a.Acquire(t, ns, "orders-writer", 1)
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
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
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "deleter", Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencedresources"}, Verbs: []string{"delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deleter", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deleter"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "gitops"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	gitops, _, err := env.UserClient("gitops")
	if err != nil {
		t.Fatal(err)
	}
	key := declare(t, ns, "orders", "orders-writer")
	ta := a.Acquire(t, ns, "orders-writer", 2)
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": 1}); err != nil {
		t.Fatal(err)
	}
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: ns}}
	testenv.Eventually(t, "the deleter's RBAC to take effect and the webhook to refuse", func() (bool, string) {
		err := gitops.Delete(ctx, fr.DeepCopy(), client.DryRunAll)
		return fencing.IsNotHolder(err), fmt.Sprint(err)
	})
	err = gitops.Delete(ctx, fr.DeepCopy())
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
