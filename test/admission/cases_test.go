package admission_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/internal/operator/admission/cases"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestCases runs every row of the threat model (internal/operator/admission/cases) on the real apiserver: through
// the operator's webhooks (with the copy of the Lease), the CRD's CEL rule, RBAC and the Lease policy. The
// rows share one namespace and one FencingPolicy; each row has a Lease and objects of its own, acquired
// and written for it: its stale holder acquired epoch e-1, the holder e (the same user), and wrote the
// objects at e.
func TestCases(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	grantPolicies(t, ns, string(cases.HolderUser))
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status", "deployments/scale"}, Verbs: []string{"*"}},
		{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencedresources", "fencedresources/status"}, Verbs: []string{"*"}},
	}
	env.Grant(t, ns, "cases-objects", rules, string(cases.HolderUser), string(cases.OtherElector), string(cases.Editor), string(cases.BreakGlass),
		string(cases.GarbageCollector), string(cases.DeploymentCtrl), string(cases.ReplicaSetCtrl))
	// Each row's Lease and objects are its own; one policy covers them all (ConfigMaps labelled
	// app=fenced, all Deployments), bound to the Lease the rows of the object kinds use, in turn.
	declarePolicyFor(t, ns, "app", "objects")
	holder := newWorker(t, ns, "holder")
	holder.Fences = protocol.Fences{FencedResources: true, Objects: true}
	stale := holder
	stale.Holder = "stale-replica"
	intruder := newWorker(t, ns, "intruder")
	intruder.Fences = holder.Fences
	// The operator runs as env's user (operatortest.Start).
	clients := map[cases.Actor]client.Client{cases.HolderUser: holder.Client, cases.OtherElector: intruder.Client, cases.Operator: env.Client}
	actor := func(a cases.Actor) client.Client {
		if c, ok := clients[a]; ok {
			return c
		}
		c := env.ClientAs(t, string(a), a.Groups()...)
		clients[a] = c
		return c
	}

	for i, c := range cases.Table {
		t.Run(c.Name, func(t *testing.T) {
			lease := "objects" // the object kinds' Lease is the policy's
			if c.Target.FencedResource() || c.Target == cases.Lease {
				lease = fmt.Sprintf("l-%d", i)
			}
			epoch := nextEpoch(t, ns, lease)
			stale.Acquire(t, ns, lease, epoch)
			tok := holder.Acquire(t, ns, lease, epoch+1)
			// The row's object is the holder's, created below at tok: stored at the current epoch, as
			// fence-on-acquire would leave it. Earlier rows' objects of the same Lease take no part in this row.
			obj := createTarget(t, c, holder, ns, i, lease, tok)
			stamp := func(patch map[string]any, e int64) []byte {
				b, err := json.Marshal(c.Stamp(patch, e))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			if c.Setup != nil {
				p := stamp(c.Setup(read(t, obj).Object), tok.Epoch)
				if err := holder.Client.Patch(t.Context(), obj.DeepCopy(), client.RawPatch(types.MergePatchType, p), client.FieldOwner(tok.FieldManager())); err != nil {
					t.Fatalf("setup %s: %v", p, err)
				}
			}
			if c.Lease == cases.Released {
				holder.Release(t, tok)
			}
			presented := map[cases.Token]int64{cases.CurrentToken: tok.Epoch, cases.StaleToken: tok.Epoch - 1, cases.FutureToken: tok.Epoch + 1}[c.Token]
			var err error
			w := actor(c.Actor)
			switch {
			case c.Op == admission.Delete && c.Precondition:
				// As Writer.Delete does: the operator's status write may come between the read and the
				// delete, and the precondition then fails with a conflict; read again and retry.
				err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					rv := read(t, obj).GetResourceVersion()
					return w.Delete(t.Context(), obj.DeepCopy(), client.Preconditions{ResourceVersion: &rv})
				})
			case c.Op == admission.Delete:
				err = w.Delete(t.Context(), obj.DeepCopy())
			default:
				p := stamp(c.Patch(read(t, obj).Object), presented)
				var opts []client.PatchOption
				if presented != 0 {
					opts = append(opts, client.FieldOwner(protocol.FieldManagerFor(presented)))
				}
				patch := client.RawPatch(types.MergePatchType, p)
				if c.Target == cases.Lease {
					// The elector role updates Leases (compare-and-swap); it does not patch them.
					err = w.Update(t.Context(), merged(t, read(t, obj), p), opts2update(opts)...)
					break
				}
				if c.Subresource != "" {
					var sub []client.SubResourcePatchOption
					if presented != 0 {
						sub = append(sub, client.FieldOwner(protocol.FieldManagerFor(presented)))
					}
					err = w.SubResource(c.Subresource).Patch(t.Context(), obj.DeepCopy(), patch, sub...)
				} else {
					err = w.Patch(t.Context(), obj.DeepCopy(), patch, opts...)
				}
			}
			got := verdictOf(t, err)
			if got != c.Want {
				t.Fatalf("%s (%s, token %s): got %q, want %q: %v", c.Name, c.Actor, c.Token, got, c.Want, err)
			}
			if err != nil && c.Target != cases.Lease && !strings.Contains(err.Error(), obj.GetName()) {
				t.Errorf("the refusal does not name %s: %v", obj.GetName(), err)
			}
		})
	}
}

// declarePolicyFor declares FencingPolicy name in ns for lease: ConfigMaps labelled app=fenced and all
// Deployments, and waits until the webhook enforces it.
func declarePolicyFor(t *testing.T, ns, name, lease string) {
	t.Helper()
	p := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: lease, Resources: []fencingv1alpha1.FencedObjects{
			{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}},
			{Group: "apps", Resource: "deployments"}}}}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	enforced(t, ns, name, map[string]string{"app": "fenced"})
}

// nextEpoch is the epoch the next acquisition of Lease ns/name takes: one above the stored one, or 1.
func nextEpoch(t *testing.T, ns, name string) int64 {
	t.Helper()
	var l coordinationv1.Lease
	err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: name}, &l)
	if apierrors.IsNotFound(err) {
		return 1
	}
	if err != nil {
		t.Fatal(err)
	}
	e, err := strconv.ParseInt(l.Annotations[protocol.EpochAnnotation], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return e + 1
}

// createTarget creates row i's target as the holder wrote it at tok (a Lease row's target is its Lease), and
// returns a reference to it.
func createTarget(t *testing.T, c cases.Case, holder worker, ns string, i int, lease string, tok elector.Token) *unstructured.Unstructured {
	t.Helper()
	ctx := t.Context()
	ref := &unstructured.Unstructured{}
	name := fmt.Sprintf("row-%d", i)
	switch c.Target {
	case cases.Lease:
		ref.SetGroupVersionKind(schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"})
		name = lease
	case cases.FencedResource:
		key := declare(t, ns, name, lease)
		if _, err := fencing.NewWriter(holder.Client).Set(ctx, tok, key, map[string]any{"v": "a"}); err != nil {
			t.Fatal(err)
		}
		ref.SetGroupVersionKind(fencingv1alpha1.GroupVersion.WithKind("FencedResource"))
	case cases.Declaration:
		declare(t, ns, name, lease)
		// Raised as the holder's fence-on-acquire raises it.
		if err := fencing.FenceOnAcquire(holder.Client).Raise(ctx, tok); err != nil {
			t.Fatal(err)
		}
		ref.SetGroupVersionKind(fencingv1alpha1.GroupVersion.WithKind("FencedResource"))
	case cases.ConfigMap:
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "fenced"}},
			Data: map[string]string{"v": "a"}}
		if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		ref.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	case cases.Deployment:
		if err := fencing.NewClient(holder.Client, tokenOf(tok)).Create(ctx, testenv.Deployment(ns, name)); err != nil {
			t.Fatal(err)
		}
		ref.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	}
	ref.SetNamespace(ns)
	ref.SetName(name)
	return ref
}

// merged is u with the JSON merge patch p applied, as the apiserver applies it.
func merged(t *testing.T, u *unstructured.Unstructured, p []byte) *unstructured.Unstructured {
	t.Helper()
	out, err := cases.MergePatch(u.Object, p)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: out}
}

func opts2update(opts []client.PatchOption) []client.UpdateOption {
	var out []client.UpdateOption
	for _, o := range opts {
		if fo, ok := o.(client.FieldOwner); ok {
			out = append(out, fo)
		}
	}
	return out
}

func read(t *testing.T, ref *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ref.GroupVersionKind())
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ref), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// verdictOf is what err says of the write: "" admitted, the fencing reason of a refusal, or
// cases.LeasePolicy for a refusal of fencekit's Lease policy. Anything else (RBAC, a 500) fails the test.
func verdictOf(t *testing.T, err error) protocol.Reason {
	t.Helper()
	if err == nil {
		return ""
	}
	if r := fencing.ReasonOf(err); r != "" {
		if status, ok := err.(apierrors.APIStatus); ok && status.Status().Code >= 500 {
			t.Errorf("a %d, not a refusal: %v", status.Status().Code, err)
		}
		return r
	}
	if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") && strings.Contains(err.Error(), "fenced lease") {
		return cases.LeasePolicy
	}
	t.Fatalf("neither admitted nor refused by fencekit: %v", err)
	return ""
}
