package admission_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/internal/operator/admission/cases"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// base is the stored target of every row, as the holder wrote it at cases.Current: with the managedFields
// entry of its epoch manager owning what it wrote.
func base(target cases.Target) map[string]any {
	manager := map[string]any{"manager": protocol.FieldManagerFor(cases.Current), "operation": "Update", "fieldsType": "FieldsV1",
		"time": now.Add(-time.Second).UTC().Format(time.RFC3339)}
	meta := map[string]any{"namespace": "ns", "resourceVersion": "7", "uid": "00000000-0000-0000-0000-0000000000aa"}
	switch target {
	case cases.FencedResource:
		meta["name"] = "r"
		meta["annotations"] = map[string]any{fencingv1alpha1.WriterAnnotation: cases.Holder}
		manager["apiVersion"] = "fencing.fencekit.io/v1alpha1"
		manager["fieldsV1"] = map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{"f:" + fencingv1alpha1.WriterAnnotation: map[string]any{}}},
			"f:spec": map[string]any{"f:data": map[string]any{}, "f:epoch": map[string]any{}}}
		meta["managedFields"] = []any{manager}
		return map[string]any{"apiVersion": "fencing.fencekit.io/v1alpha1", "kind": "FencedResource", "metadata": meta,
			"spec": map[string]any{"leaseName": "l", "epoch": cases.Current, "data": map[string]any{"v": "a"}}}
	case cases.Declaration:
		meta["name"] = "d"
		meta["annotations"] = map[string]any{fencingv1alpha1.WriterAnnotation: cases.Holder}
		manager["apiVersion"] = "fencing.fencekit.io/v1alpha1"
		manager["fieldsV1"] = map[string]any{"f:metadata": map[string]any{"f:annotations": map[string]any{"f:" + fencingv1alpha1.WriterAnnotation: map[string]any{}}},
			"f:spec": map[string]any{"f:raisedEpoch": map[string]any{}}}
		meta["managedFields"] = []any{manager}
		return map[string]any{"apiVersion": "fencing.fencekit.io/v1alpha1", "kind": "FencedResource", "metadata": meta,
			"spec": map[string]any{"leaseName": "l", "epoch": int64(0), "raisedEpoch": cases.Current}}
	case cases.Lease:
		meta["name"] = "l"
		meta["labels"] = map[string]any{protocol.FencedLabel: "true"}
		meta["annotations"] = map[string]any{protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: string(cases.HolderUser),
			protocol.FencesAnnotation: protocol.Fences{FencedResources: true, Objects: true}.String()}
		manager["apiVersion"] = "coordination.k8s.io/v1"
		manager["fieldsV1"] = map[string]any{"f:spec": map[string]any{"f:holderIdentity": map[string]any{}, "f:renewTime": map[string]any{}}}
		meta["managedFields"] = []any{manager}
		return map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
			"spec": map[string]any{"holderIdentity": cases.Holder, "leaseDurationSeconds": int64(15),
				"renewTime": now.Add(-5 * time.Second).UTC().Format("2006-01-02T15:04:05.000000Z")}}
	case cases.ConfigMap:
		meta["name"] = "cm"
		meta["labels"] = map[string]any{"app": "fenced"}
		meta["annotations"] = map[string]any{fencingv1alpha1.ObjectEpochAnnotation: "3"}
		manager["apiVersion"] = "v1"
		manager["fieldsV1"] = map[string]any{"f:data": map[string]any{"f:v": map[string]any{}},
			"f:metadata": map[string]any{"f:labels": map[string]any{"f:app": map[string]any{}}, "f:annotations": map[string]any{"f:" + fencingv1alpha1.ObjectEpochAnnotation: map[string]any{}}}}
		meta["managedFields"] = []any{manager}
		return map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": map[string]any{"v": "a"}}
	default:
		meta["name"] = "dep"
		meta["labels"] = map[string]any{"app": "fenced"}
		meta["annotations"] = map[string]any{fencingv1alpha1.ObjectEpochAnnotation: "3"}
		manager["apiVersion"] = "apps/v1"
		manager["fieldsV1"] = map[string]any{"f:spec": map[string]any{"f:replicas": map[string]any{}},
			"f:metadata": map[string]any{"f:labels": map[string]any{"f:app": map[string]any{}}, "f:annotations": map[string]any{"f:" + fencingv1alpha1.ObjectEpochAnnotation: map[string]any{}}}}
		meta["managedFields"] = []any{manager}
		return map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
			"spec": map[string]any{"replicas": int64(1)}, "status": map[string]any{"observedGeneration": int64(1)}}
	}
}

func mergePatch(t *testing.T, obj map[string]any, patch any) map[string]any {
	t.Helper()
	p, ok := patch.(string)
	if !ok {
		b, err := json.Marshal(patch)
		if err != nil {
			t.Fatal(err)
		}
		p = string(b)
	}
	out, err := cases.MergePatch(obj, []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// leaseFor is Lease l in the row's state, at cases.Current, acquired by the holder's user.
func leaseFor(c cases.Case) *coordinationv1.Lease {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", Labels: map[string]string{protocol.FencedLabel: "true"},
			Annotations: map[string]string{protocol.EpochAnnotation: "3", protocol.AcquirerAnnotation: string(cases.HolderUser),
				protocol.FencesAnnotation: protocol.Fences{FencedResources: true, Objects: true}.String()}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(cases.Holder), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-5 * time.Second)))},
	}
	if c.Lease == cases.Released {
		l.Spec.HolderIdentity = ptr.To("")
	}
	return l
}

// ownWrittenAnnotations gives the holder's managedFields entry (base's) the annotations of stored that
// differ from before, as the apiserver records the holder's setup write (an Update owns what it changed).
func ownWrittenAnnotations(stored map[string]any, before map[string]string) {
	after, _, _ := unstructured.NestedStringMap(stored, "metadata", "annotations")
	entries, _, _ := unstructured.NestedSlice(stored, "metadata", "managedFields")
	if len(entries) == 0 {
		return
	}
	holder, _ := entries[0].(map[string]any)
	for k, v := range after {
		if w, ok := before[k]; ok && w == v {
			continue
		}
		if err := unstructured.SetNestedField(holder, map[string]any{}, "fieldsV1", "f:metadata", "f:annotations", "f:"+k); err != nil {
			panic(err)
		}
	}
	entries[0] = holder
	if err := unstructured.SetNestedSlice(stored, entries, "metadata", "managedFields"); err != nil {
		panic(err)
	}
}

// request is the admission request of row c: its stored object after the setup, and what its write
// results in.
func request(t *testing.T, c cases.Case) *admission.Request {
	t.Helper()
	stored := base(c.Target)
	if c.Setup != nil {
		before, _, _ := unstructured.NestedStringMap(stored, "metadata", "annotations")
		stored = mergePatch(t, stored, c.Stamp(c.Setup(stored), cases.Current))
		ownWrittenAnnotations(stored, before)
	}
	op := c.Op
	if op == "" {
		op = admission.Update
	}
	r := &admission.Request{Operation: op, Subresource: c.Subresource, User: admission.User{Name: string(c.Actor), Groups: c.Actor.Groups(), Operator: c.Actor == cases.Operator},
		Kind: string(c.Target), Namespace: "ns", LeaseName: "l", Old: &unstructured.Unstructured{Object: stored}}
	r.Name, _, _ = unstructured.NestedString(stored, "metadata", "name")
	switch {
	case c.Target.FencedResource():
		r.Class = admission.FencedResource
	case c.Target == cases.Lease:
		r.Class, r.LeaseName = admission.FencedLease, r.Name
	default:
		// The FencingPolicy's coverage was recorded before the stale holder's acquisition.
		r.Class, r.Policy, r.CoveredBefore = admission.Object, "ns/app", true
		r.CoverageRecorded, r.CoverageEpoch = true, cases.Stale-1
	}
	if op == admission.Delete {
		if c.Precondition {
			r.DeletePrecondition = r.Old.GetResourceVersion()
		}
		r.Complete()
		return r
	}
	if e := c.Token.Epoch(); e != 0 {
		r.FieldManager = protocol.FieldManagerFor(e)
	}
	written := mergePatch(t, stored, c.Stamp(c.Patch(stored), c.Token.Epoch()))
	r.New = &unstructured.Unstructured{Object: written}
	if r.Class == admission.Object {
		labels, _, _ := unstructured.NestedStringMap(written, "metadata", "labels")
		r.CoveredAfter = c.Target == cases.Deployment || labels["app"] == "fenced"
	}
	r.Complete()
	return r
}

// TestCases runs every row of the threat model (internal/operator/admission/cases) but the Lease policy's through
// the rule, as the webhook does with a quorum read of the Lease; and again with a copy of the Lease that
// lags the acquisition of cases.Current (it shows the stale holder's epoch, live, declaring): the copy
// must never admit what the quorum read refuses, nor refuse a write whose verdict needs the Lease.
func TestCases(t *testing.T) {
	for _, c := range cases.Table {
		if c.Want == cases.LeasePolicy {
			continue // the Lease policy is CEL: test/admission runs these rows on the apiserver
		}
		t.Run(c.Name, func(t *testing.T) {
			r := request(t, c)
			lease := leaseFor(c)
			got := decideOnQuorum(r, lease)
			var reason protocol.Reason
			if got != nil {
				reason = got.Reason
				if diff := diffErr(got, got); diff != "" {
					t.Error(diff)
				}
			}
			if reason != c.Want {
				t.Fatalf("Decide = %q (%v), want %q", reason, got, c.Want)
			}

			lagging := lease.DeepCopy()
			lagging.Annotations[protocol.EpochAnnotation] = "2"
			if v := admission.Decide(r, admission.ParseLease(lagging, admission.Copy), now); v.Admitted() && got != nil {
				t.Errorf("a copy lagging at epoch 2 admits what the quorum read refuses (%s)", got.Reason)
			} else if v.Need == admission.Decided && v.Err != nil && admission.Decide(r, nil, now).Need != admission.Decided {
				t.Errorf("a copy refused a write that needs the Lease (%v): a copy may only admit", v.Err)
			}
		})
	}
}

// TestCopyDecides: which writes the webhook's copy of the Lease may admit on its own. It is the fast path
// (no quorum read), so it is taken for the holder's steady writes, and for nothing that changes coverage,
// raises, or writes a subresource.
func TestCopyDecides(t *testing.T) {
	holderWrite := func(target cases.Target, patch func(map[string]any) map[string]any) cases.Case {
		return cases.Case{Target: target, Actor: cases.HolderUser, Token: cases.CurrentToken, Patch: patch}
	}
	data := func(stored map[string]any) map[string]any {
		if stored["kind"] == "FencedResource" {
			return map[string]any{"spec": map[string]any{"data": map[string]any{"v": "b"}}}
		}
		return map[string]any{"data": map[string]any{"v": "b"}}
	}
	relabel := func(map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": nil}}}
	}
	tests := map[string]struct {
		c        cases.Case
		declares protocol.Fences
		coverage func(*admission.Request)
		want     admission.Need // Decided: admitted on the copy
	}{
		"the holder's FencedResource write, declared":   {holderWrite(cases.FencedResource, data), protocol.Fences{FencedResources: true}, nil, admission.Decided},
		"the holder's ConfigMap write, declared":        {holderWrite(cases.ConfigMap, data), protocol.Fences{Objects: true}, nil, admission.Decided},
		"the holder's ConfigMap write, other kind":      {holderWrite(cases.ConfigMap, data), protocol.Fences{FencedResources: true}, nil, admission.NeedQuorum},
		"the holder's FencedResource write, undeclared": {holderWrite(cases.FencedResource, data), protocol.Fences{}, nil, admission.NeedQuorum},
		"the holder labels a ConfigMap out":             {holderWrite(cases.ConfigMap, relabel), protocol.Fences{Objects: true}, nil, admission.NeedQuorum},
		// The policy changed (or was created) while the Lease was held at Current: that acquisition's
		// fence did not list what it declares now.
		"the holder's ConfigMap write, policy changed in this term": {holderWrite(cases.ConfigMap, data), protocol.Fences{Objects: true},
			func(r *admission.Request) { r.CoverageEpoch = cases.Current }, admission.NeedQuorum},
		"the holder's ConfigMap write, coverage not recorded": {holderWrite(cases.ConfigMap, data), protocol.Fences{Objects: true},
			func(r *admission.Request) { r.CoverageRecorded = false }, admission.NeedQuorum},
		"the holder's ConfigMap write, policy changed before this term": {holderWrite(cases.ConfigMap, data), protocol.Fences{Objects: true},
			func(r *admission.Request) { r.CoverageEpoch = cases.Current - 1 }, admission.Decided},
		// A declaration an earlier acquisition raised (epoch, no data): fence-on-acquire raises it only
		// within its budget, so the copy must not decide a write at the epoch it holds.
		"the holder's first write to a raised declaration": {holderWrite(cases.FencedResource, data), protocol.Fences{FencedResources: true},
			func(r *admission.Request) { unstructured.RemoveNestedField(r.Old.Object, "spec", "data") }, admission.NeedQuorum},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := request(t, tc.c)
			if tc.coverage != nil {
				tc.coverage(r)
			}
			if v := admission.Decide(r, nil, now); v.Need != admission.NeedLease && tc.want == admission.Decided {
				t.Fatalf("Decide without a Lease = %v, want NeedLease (the copy may decide)", v.Need)
			}
			l := leaseFor(tc.c)
			l.Annotations[protocol.FencesAnnotation] = tc.declares.String()
			v := admission.Decide(r, admission.ParseLease(l, admission.Copy), now)
			if v.Need != tc.want || (tc.want == admission.Decided && v.Err != nil) {
				t.Errorf("Decide on the copy = %v (%v), want %v", v.Need, v.Err, tc.want)
			}
		})
	}
}

// TestClusterControllersWaitForAHoldBriefly: the rows of the table where the Deployment controller writes
// status while the holder's hold or marker is armed, with the holder's managedFields entry (the write that
// armed it) at several ages. Under MaxClusterControllerHold the controller waits (refused, to retry); past
// it, it writes, so that a hold its holder never cleared cannot lock the cluster out for the term. An
// editor waits whatever the age.
func TestClusterControllersWaitForAHoldBriefly(t *testing.T) {
	for _, c := range cases.Table {
		if c.Actor != cases.DeploymentCtrl || c.Setup == nil || c.Want != protocol.ReasonTokenMissing {
			continue
		}
		for _, age := range []time.Duration{0, admission.MaxClusterControllerHold, admission.MaxClusterControllerHold + time.Second, time.Hour} {
			for _, actor := range []cases.Actor{cases.DeploymentCtrl, cases.Editor} {
				for _, forged := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%s/armed %s ago/another entry of the token dated 2099: %v", c.Name, actor, age, forged), func(t *testing.T) {
						c := c
						c.Actor = actor
						r := request(t, c)
						fields := r.Old.GetManagedFields()
						for i := range fields {
							fields[i].Time = &metav1.Time{Time: now.Add(-age)}
						}
						if forged {
							// An entry of the same token that does not own the mark, its time rewritten by a
							// write without the token (round 22): it says nothing of when the mark was armed.
							fields = append(fields, metav1.ManagedFieldsEntry{Manager: protocol.FieldManagerFor(cases.Current),
								Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1", FieldsType: "FieldsV1",
								FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`),
								Time:     &metav1.Time{Time: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)}})
						}
						r.Old.SetManagedFields(fields)
						checkHold(t, r, c, actor, age)
					})
				}
			}
		}
	}
}

// checkHold decides r, the write of row c by actor under a mark armed age ago: an editor waits whatever
// the age, a cluster controller up to MaxClusterControllerHold.
func checkHold(t *testing.T, r *admission.Request, c cases.Case, actor cases.Actor, age time.Duration) {
	t.Helper()
	got := decideOnQuorum(r, leaseFor(c))
	wantHeld := actor == cases.Editor || age <= admission.MaxClusterControllerHold
	if held := got != nil && got.Reason == protocol.ReasonTokenMissing && strings.Contains(got.Message, "send it again once the holder has written"); held != wantHeld {
		t.Errorf("armed %s ago, %s: Decide = %v, want held %v", age, actor, got, wantHeld)
	}
}

// TestDecideRefusesWhatWasNotRead: a request Decide gets without Complete (a caller that forgot it) is
// refused, naming the object, whatever it presents.
func TestDecideRefusesWhatWasNotRead(t *testing.T) {
	r := &admission.Request{Class: admission.Object, Operation: admission.Update, Kind: "ConfigMap", Namespace: "ns", Name: "app",
		FieldManager: protocol.FieldManagerFor(3), LeaseName: "l", Old: &unstructured.Unstructured{Object: map[string]any{}},
		New: &unstructured.Unstructured{Object: map[string]any{}}}
	v := admission.Decide(r, nil, now)
	if v.Need != admission.Decided || v.Err == nil || v.Err.Reason != protocol.ReasonInvalid || !strings.Contains(v.Err.Message, "ConfigMap ns/app") {
		t.Fatalf("Decide on a request that was not read = %+v (%v), want refused as invalid, naming ConfigMap ns/app", v, v.Err)
	}
	r.Complete()
	if v := admission.Decide(r, nil, now); v.Need != admission.NeedQuorum && v.Need != admission.NeedLease {
		t.Fatalf("Decide once read = %+v, want it to ask for the Lease", v)
	}
}
