package cluster

import (
	"fmt"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// AppLease is the Lease NewHolder's policy names.
const AppLease = "app-writer"

// Holder is the holder of a Lease (AppLease, unless said otherwise) in a fresh namespace: a user bound to
// the fencekit-elector role and allowed rules, that acquires the Lease and writes through fencing.NewClient.
type Holder struct {
	Env       *testenv.Env
	NS, Lease string
	Worker    testenv.Worker
	Token     elector.Token
	// C writes with the holder's token.
	C client.Client
}

// HolderOf is worker as the holder of Lease lease in ns at token (the zero Token: not yet).
func HolderOf(env *testenv.Env, ns, lease string, worker testenv.Worker, token elector.Token) *Holder {
	h := &Holder{Env: env, NS: ns, Lease: lease, Worker: worker, Token: token}
	h.C = fencing.NewClient(worker.Client, func() elector.Token { return h.Token })
	return h
}

// NewHolder starts the operator for t, creates a namespace, a FencingPolicy "app" declaring resources for
// AppLease, and its holder (who has not acquired the Lease yet), allowed rules and listing the policies;
// it waits until the webhook refuses an unfenced dry-run create of probe (in the namespace), so that the
// policy is enforced when it returns.
func NewHolder(t *testing.T, env *testenv.Env, probe client.Object, rules []rbacv1.PolicyRule, resources ...fencingv1alpha1.FencedObjects) *Holder {
	t.Helper()
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	h := HolderOf(env, ns, AppLease, env.NewWorker(t, ns, "app"), elector.Token{})
	// Fence-on-acquire (TakeOver) lists the namespace's FencingPolicies.
	rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencingpolicies"}, Verbs: []string{"get", "list", "watch"}})
	env.Grant(t, ns, "app-objects", rules, h.Worker.User)
	p := &fencingv1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec:       fencingv1alpha1.FencingPolicySpec{LeaseName: AppLease, Resources: resources},
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("declaring FencingPolicy app: %v", err)
	}
	probe.SetNamespace(ns)
	testenv.Eventually(t, "the webhook refuses an unfenced write of a declared object", func() (bool, string) {
		err := env.Client.Create(t.Context(), probe.DeepCopyObject().(client.Object), client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	return h
}

// Acquire makes the holder acquire the Lease at epoch 1; its writes through C carry that token from then on.
func (h *Holder) Acquire(t *testing.T) {
	t.Helper()
	h.Token = h.Worker.Acquire(t, h.NS, h.Lease, 1)
}

// Create creates obj with the holder's token; RBAC granted a moment ago may not be in effect yet.
func (h *Holder) Create(t *testing.T, obj client.Object) {
	t.Helper()
	obj.SetNamespace(h.NS)
	testenv.Eventually(t, "the holder creates "+obj.GetName(), func() (bool, string) {
		err := h.C.Create(t.Context(), obj)
		return err == nil, testenv.ErrString(err)
	})
}

// WriterAnnotation is what TakeOver's writes set on the object: which replica wrote it last.
const WriterAnnotation = "test.fencekit.io/written-by"

// TakeOver shows a stale holder refused in the holder's namespace: a second replica of the holder's user
// acquires the Lease at the next epoch as an elector that declares fence-on-acquire for objects does
// (fencing.FenceObjectsOnAcquire runs before its token is used) and writes obj (the test's declared
// object, in the namespace); the replica it took over from then writes obj presenting its old epoch. That
// write must be refused as stale and obj keep the new holder's write. From then on the holder is the new
// replica, at the new epoch.
func (h *Holder) TakeOver(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := t.Context()
	old := h.Token
	stale := fencing.NewClient(h.Worker.Client, func() elector.Token { return old })
	next := h.Worker
	next.Holder = fmt.Sprintf("%s-%d", h.Worker.User, old.Epoch+1)
	next.Fences = protocol.Fences{Objects: true}
	tok := next.Acquire(t, h.NS, h.Lease, old.Epoch+1)
	if err := fencing.FenceObjectsOnAcquire(next.Client, next.Client).Raise(ctx, tok); err != nil {
		t.Fatalf("%s's fence-on-acquire at epoch %d: %v", next.Holder, tok.Epoch, err)
	}
	h.Worker, h.Token = next, tok
	obj.SetNamespace(h.NS)
	key := client.ObjectKeyFromObject(obj)
	writtenBy := func(holder string) client.Patch {
		return client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, WriterAnnotation, holder))
	}
	if err := h.C.Patch(ctx, obj.DeepCopyObject().(client.Object), writtenBy(next.Holder)); err != nil {
		t.Fatalf("the new holder %s's write of %s at epoch %d: %v", next.Holder, key, tok.Epoch, err)
	}
	err := stale.Patch(ctx, obj.DeepCopyObject().(client.Object), writtenBy(old.Holder))
	if !fencing.IsStale(err) {
		t.Errorf("%s's write of %s at its old epoch %d after %s took over at %d: %v, want refused as stale",
			old.Holder, key, old.Epoch, next.Holder, tok.Epoch, testenv.ErrString(err))
	}
	got := obj.DeepCopyObject().(client.Object)
	if err := h.Env.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if by := got.GetAnnotations()[WriterAnnotation]; by != next.Holder {
		t.Errorf("%s was last written by %q, want the new holder %s", key, by, next.Holder)
	}
}

// All is the rule granting every verb on resources of group.
func All(group string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: []string{"*"}}
}
