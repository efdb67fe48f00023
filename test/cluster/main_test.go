package cluster

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/operatortest"
	"github.com/fencekit/fencekit/internal/testenv"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

var (
	env *testenv.Env
	kcm *testenv.ControllerManager
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(run(m))
}

// run starts the control plane and kube-controller-manager, runs the tests and stops both, the controller
// manager first, whatever happened.
func run(m *testing.M) int {
	e, err := testenv.Start(testenv.WithWebhooks(), testenv.WithLeasePolicy())
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		return 1
	}
	env = e
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: stopping the control plane:", err)
		}
	}()
	if kcm, err = env.StartControllerManager(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		return 1
	}
	code := m.Run()
	if err := kcm.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

const lease = "app-writer"

// holder is the holder of a Lease (lease, unless said otherwise) in a fresh namespace: a user bound to the
// fencekit-elector role and allowed rules, that acquired the Lease at epoch 1 and writes through
// fencing.NewClient.
type holder struct {
	ns, lease string
	worker    testenv.Worker
	token     elector.Token
	// c writes with the holder's token.
	c client.Client
}

// holderOf is worker as the holder of Lease leaseName in ns at token (the zero Token: not yet).
func holderOf(ns, leaseName string, worker testenv.Worker, token elector.Token) *holder {
	h := &holder{ns: ns, lease: leaseName, worker: worker, token: token}
	h.c = fencing.NewClient(worker.Client, func() elector.Token { return h.token })
	return h
}

// newHolder starts the operator for t, creates a namespace, a FencingPolicy declaring resources for
// lease, and its holder (who has not acquired the Lease yet), allowed rules; it waits until the webhook refuses an unfenced dry-run create of
// probe (in the namespace), so that the policy is enforced when it returns.
func newHolder(t *testing.T, probe client.Object, rules []rbacv1.PolicyRule, resources ...fencingv1alpha1.FencedObjects) *holder {
	t.Helper()
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	h := holderOf(ns, lease, env.NewWorker(t, ns, "app"), elector.Token{})
	// Fence-on-acquire (takeOver) lists the namespace's FencingPolicies.
	rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencingpolicies"}, Verbs: []string{"get", "list", "watch"}})
	env.Grant(t, h.ns, "app-objects", rules, h.worker.User)
	p := &fencingv1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "app"},
		Spec:       fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: resources},
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatalf("declaring FencingPolicy app: %v", err)
	}
	probe.SetNamespace(h.ns)
	testenv.Eventually(t, "the webhook refuses an unfenced write of a declared object", func() (bool, string) {
		err := env.Client.Create(t.Context(), probe.DeepCopyObject().(client.Object), client.DryRunAll)
		return fencing.IsTokenMissing(err), errString(err)
	})
	return h
}

// acquire makes the holder acquire the Lease at epoch 1; its writes through c carry that token from then on.
func (h *holder) acquire(t *testing.T) {
	t.Helper()
	h.token = h.worker.Acquire(t, h.ns, h.lease, 1)
}

// create creates obj with the holder's token; RBAC granted a moment ago may not be in effect yet.
func (h *holder) create(t *testing.T, obj client.Object) {
	t.Helper()
	obj.SetNamespace(h.ns)
	testenv.Eventually(t, "the holder creates "+obj.GetName(), func() (bool, string) {
		err := h.c.Create(t.Context(), obj)
		return err == nil, errString(err)
	})
}

// writerAnnotation is what takeOver's writes set on the object: which replica wrote it last.
const writerAnnotation = "test.fencekit.io/written-by"

// takeOver shows a stale holder refused in the holder's namespace, with kube-controller-manager running: a
// second replica of the holder's user acquires the Lease at the next epoch as an elector that declares
// fence-on-acquire for objects does (fencing.FenceObjectsOnAcquire runs before its token is used) and
// writes obj (the test's declared object, in the namespace); the replica it took over from then writes
// obj presenting its old epoch. That write must be refused as stale and obj keep the new holder's write.
// From then on the holder is the new replica, at the new epoch.
func (h *holder) takeOver(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := t.Context()
	old := h.token
	stale := fencing.NewClient(h.worker.Client, func() elector.Token { return old })
	next := h.worker
	next.Holder = fmt.Sprintf("%s-%d", h.worker.User, old.Epoch+1)
	next.Fences = elector.Fences{Objects: true}
	tok := next.Acquire(t, h.ns, h.lease, old.Epoch+1)
	if err := fencing.FenceObjectsOnAcquire(next.Client, next.Client)(ctx, tok); err != nil {
		t.Fatalf("%s's fence-on-acquire at epoch %d: %v", next.Holder, tok.Epoch, err)
	}
	h.worker, h.token = next, tok
	obj.SetNamespace(h.ns)
	key := client.ObjectKeyFromObject(obj)
	writtenBy := func(holder string) client.Patch {
		return client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, writerAnnotation, holder))
	}
	if err := h.c.Patch(ctx, obj.DeepCopyObject().(client.Object), writtenBy(next.Holder)); err != nil {
		t.Fatalf("the new holder %s's write of %s at epoch %d: %v", next.Holder, key, tok.Epoch, err)
	}
	err := stale.Patch(ctx, obj.DeepCopyObject().(client.Object), writtenBy(old.Holder))
	if !fencing.IsStale(err) {
		t.Errorf("%s's write of %s at its old epoch %d after %s took over at %d: %v, want refused as stale",
			old.Holder, key, old.Epoch, next.Holder, tok.Epoch, errString(err))
	}
	got := obj.DeepCopyObject().(client.Object)
	if err := env.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if by := got.GetAnnotations()[writerAnnotation]; by != next.Holder {
		t.Errorf("%s was last written by %q, want the new holder %s", key, by, next.Holder)
	}
}

func errString(err error) string {
	if err == nil {
		return "admitted"
	}
	return err.Error()
}

// kcmSays waits until a line of kube-controller-manager's log contains every part, and returns it: the
// evidence of what a controller tried and what the apiserver answered.
func kcmSays(t *testing.T, what string, parts ...string) string {
	t.Helper()
	var found string
	testenv.EventuallyWithin(t, 60*time.Second, what, func() (bool, string) {
		b, err := os.ReadFile(kcm.Log())
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(b), "\n") {
			if containsAll(line, parts) {
				found = line
				return true, line
			}
		}
		var near []string // the lines about the same namespace, to say what the controllers did instead
		if ns := testNamespace.FindString(parts[0]); ns != "" {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, ns) {
					near = append(near, line)
				}
			}
		}
		return false, fmt.Sprintf("no line of %s contains all of %q; its lines about that namespace: %q", kcm.Log(), parts, near)
	})
	t.Logf("kube-controller-manager: %s", found)
	return found
}

var testNamespace = regexp.MustCompile(`fencekit-test-[a-z0-9]+`)

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func all(group string, resources ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: []string{"*"}}
}
