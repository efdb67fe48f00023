package cases

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/protocol"
)

const (
	markerKey = fencingv1alpha1.DeleteAtEpochAnnotation
	writerKey = fencingv1alpha1.WriterAnnotation
	recordKey = fencingv1alpha1.ObjectEpochAnnotation
)

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Table is every row. Its order is the order rows are run and reported in.
var Table = []Case{
	// A FencedResource.
	{Name: "the holder writes data", Target: FencedResource, Actor: HolderUser, Token: CurrentToken, Patch: changeData},
	{Name: "a stale holder writes data", Target: FencedResource, Actor: HolderUser, Token: StaleToken, Patch: changeData, Want: protocol.ReasonStale,
		Why: "a paused replica of the holder's Deployment resumes after the takeover"},
	{Name: "the holder's user writes data without a token", Target: FencedResource, Actor: HolderUser, Token: NoToken, Patch: changeData,
		Want: protocol.ReasonTokenMissing, Why: "a merge patch, kubectl edit or a server-side apply that leaves the token out inherits nothing"},
	{Name: "another elector presents the current token", Target: FencedResource, Actor: OtherElector, Token: CurrentToken, Patch: changeData,
		Want: protocol.ReasonNotHolder, Why: "an epoch is not a password: it is bound to the user that acquired it"},
	{Name: "another elector presents a future epoch", Target: FencedResource, Actor: OtherElector, Token: FutureToken, Patch: changeData,
		Want: protocol.ReasonFutureEpoch},
	{Name: "an editor labels a FencedResource", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: label("team", "orders"),
		Why: "a FencedResource's labels are free: fencekit reads none"},
	{Name: "an editor annotates a FencedResource", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: annotate("example.com/note", "x")},
	{Name: "an editor sets kubectl's last-applied configuration", Target: FencedResource, Actor: Editor, Token: NoToken,
		Patch: annotate(admission.LastAppliedAnnotation, `{"spec":{"data":{"a":1,"b":1}}}`), Want: protocol.ReasonTokenMissing,
		Why: "the holder's next kubectl apply deletes what it lists and the holder's configuration does not"},
	{Name: "an editor sets the writer annotation", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: annotate(writerKey, "someone"),
		Want: protocol.ReasonTokenMissing},
	{Name: "an editor adds a finalizer", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: finalizers(1)},
	{Name: "an editor pads finalizers", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: padFinalizers,
		Want: protocol.ReasonInvalid, Why: "free additions are bounded: nobody without the token may pad the object toward etcd's limit"},
	{Name: "an editor pads labels", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: padLabels, Want: protocol.ReasonInvalid},
	{Name: "an editor adds the orphan finalizer", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: addFinalizer("orphan"),
		Want: protocol.ReasonTokenMissing, Why: "the holder's delete would orphan the dependents instead of deleting them"},
	{Name: "an editor moves ownership of the data to the holder's apply", Target: FencedResource, Actor: Editor, Token: NoToken,
		Patch: stealOwnership, Want: protocol.ReasonTokenMissing,
		Why: "managedFields decide what the holder's next server-side apply prunes"},
	{Name: "an editor adds an owner", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: owners(ghost),
		Want: protocol.ReasonTokenMissing, Why: "an owner reference deletes"},
	{Name: "the operator fills the status of a FencedResource labelled to the bound", Target: FencedResource, Actor: Operator, Token: NoToken,
		Setup: labels(admission.MaxFreePartEntries), Subresource: "status", Patch: fullStatus,
		Why: "whoever may label a FencedResource cannot hide its status: the operator's status writes have an allowance"},
	{Name: "an editor fills the status of a FencedResource labelled to the bound", Target: FencedResource, Actor: Editor, Token: NoToken,
		Setup: labels(admission.MaxFreePartEntries), Subresource: "status", Patch: fullStatus, Want: protocol.ReasonInvalid,
		Why: "the allowance is the operator's: nobody else can spend it"},
	{Name: "the garbage collector orphans", Target: FencedResource, Actor: GarbageCollector, Token: NoToken, Setup: owners(ghost),
		Patch: owners()},
	{Name: "break glass writes data without a token", Target: FencedResource, Actor: BreakGlass, Token: NoToken, Patch: changeData,
		Want: protocol.ReasonTokenMissing, Why: "break glass skips the acquirer check only"},
	{Name: "break glass presents the current token", Target: FencedResource, Actor: BreakGlass, Token: CurrentToken, Patch: changeData},
	{Name: "the holder writes after its release", Target: FencedResource, Actor: HolderUser, Token: CurrentToken, Lease: Released,
		Patch: changeData, Want: protocol.ReasonNotHolder},
	{Name: "the holder keeps an armed marker in a raw write", Target: FencedResource, Actor: HolderUser, Token: CurrentToken,
		Setup: annotate(markerKey, marker), Raw: true, Patch: changeData,
		Why: "a marker alone authorises nothing: the delete must also name the marker write's resourceVersion"},
	{Name: "an editor deletes a FencedResource", Target: FencedResource, Actor: Editor, Op: admission.Delete, Want: protocol.ReasonNotHolder},
	{Name: "the holder's user deletes without the marker", Target: FencedResource, Actor: HolderUser, Op: admission.Delete,
		Want: protocol.ReasonTokenMissing, Why: "a DELETE carries no token: a stale replica's bare DELETE"},
	{Name: "the holder deletes after its marker", Target: FencedResource, Actor: HolderUser, Op: admission.Delete, Setup: annotate(markerKey, marker),
		Precondition: true},
	{Name: "the holder's user deletes after the marker without a precondition", Target: FencedResource, Actor: HolderUser, Op: admission.Delete,
		Setup: annotate(markerKey, marker), Want: protocol.ReasonTokenMissing,
		Why: "a stale replica's bare DELETE, after a marker whose delete did not happen (or one written before coverage)"},
	{Name: "an editor deletes after the release", Target: FencedResource, Actor: Editor, Op: admission.Delete, Lease: Released},
	{Name: "an editor sets the hold annotation", Target: FencedResource, Actor: Editor, Token: NoToken, Patch: annotate(fencingv1alpha1.HoldAtEpochAnnotation, itoa(Current)),
		Want: protocol.ReasonTokenMissing, Why: "a hold refuses every write without the token: only the holder may set one"},
	{Name: "an editor sets the hold annotation on a ConfigMap", Target: ConfigMap, Actor: Editor, Token: NoToken, Patch: annotate(fencingv1alpha1.HoldAtEpochAnnotation, itoa(Current)),
		Want: protocol.ReasonTokenMissing},
	{Name: "an editor labels a FencedResource the holder is deleting", Target: FencedResource, Actor: Editor, Token: NoToken,
		Setup: annotate(markerKey, marker), Patch: label("team", "orders"), Want: protocol.ReasonTokenMissing,
		Why: "a free write between the holder's marker and its DELETE fails the DELETE's precondition, as often as anyone writes"},

	// A declaration (a FencedResource without data) that fence-on-acquire raised.
	{Name: "fence-on-acquire raises a declaration", Target: Declaration, Actor: HolderUser, Token: CurrentToken, Raise: true, Patch: nothing,
		Why: "in spec.raisedEpoch, spec.epoch left at 0: every acquisition lists declarations within its budget, whoever created them"},
	{Name: "a stale holder raises a declaration", Target: Declaration, Actor: HolderUser, Token: StaleToken, Raise: true, Patch: nothing,
		Want: protocol.ReasonStale, Why: "the CRD keeps spec.raisedEpoch monotonic"},
	{Name: "an editor raises a declaration", Target: Declaration, Actor: Editor, Token: NoToken, Patch: raisedEpoch(Future),
		Want: protocol.ReasonTokenMissing},
	{Name: "a raise that also writes data", Target: Declaration, Actor: HolderUser, Token: CurrentToken, Raise: true, Patch: changeData,
		Want: protocol.ReasonInvalid, Why: "data is written with spec.epoch"},
	{Name: "the holder writes data to a raised declaration", Target: Declaration, Actor: HolderUser, Token: CurrentToken, Patch: changeData},
	{Name: "a stale holder writes data to a raised declaration", Target: Declaration, Actor: HolderUser, Token: StaleToken, Patch: changeData,
		Want: protocol.ReasonStale, Why: "the CRD refuses data below spec.raisedEpoch: a write an earlier term's request had admitted cannot commit after the raise"},

	// A ConfigMap a FencingPolicy covers.
	{Name: "the holder writes a ConfigMap", Target: ConfigMap, Actor: HolderUser, Token: CurrentToken, Patch: changeData},
	{Name: "a stale holder writes a ConfigMap", Target: ConfigMap, Actor: HolderUser, Token: StaleToken, Patch: changeData, Want: protocol.ReasonStale},
	{Name: "the holder's user writes a ConfigMap without a token", Target: ConfigMap, Actor: HolderUser, Token: NoToken, Patch: changeData,
		Want: protocol.ReasonTokenMissing},
	{Name: "an editor adds a finalizer to a ConfigMap", Target: ConfigMap, Actor: Editor, Token: NoToken, Patch: finalizers(1)},
	{Name: "an editor pads a ConfigMap's finalizers", Target: ConfigMap, Actor: Editor, Token: NoToken, Patch: padFinalizers,
		Want: protocol.ReasonInvalid},
	{Name: "an editor adds the foregroundDeletion finalizer to a ConfigMap", Target: ConfigMap, Actor: Editor, Token: NoToken,
		Patch: addFinalizer("foregroundDeletion"), Want: protocol.ReasonTokenMissing},
	{Name: "the holder adds the orphan finalizer to a ConfigMap", Target: ConfigMap, Actor: HolderUser, Token: CurrentToken,
		Patch: addFinalizer("orphan")},
	{Name: "an editor moves ownership of a ConfigMap's data", Target: ConfigMap, Actor: Editor, Token: NoToken, Patch: stealOwnership,
		Want: protocol.ReasonTokenMissing},
	{Name: "the apiserver merges the holder's entry into ancient-changes on an editor's write", Target: ConfigMap, Actor: Editor, Token: NoToken,
		Patch: mergeIntoAncient(true), Why: "past ten Update entries the apiserver merges the oldest, whoever's write sets it off"},
	{Name: "an editor hands the holder's entry to ancient-changes without its finalizer", Target: ConfigMap, Actor: Editor, Token: NoToken,
		Setup: holderFinalizer("example.com/cleanup"), Patch: mergeIntoAncient(false), Want: protocol.ReasonTokenMissing,
		Why: "ancient-changes keeps what the holder wrote: only what the apiserver merges whole is its"},
	{Name: "an editor redates the holder's managedFields entry with a free finalizer", Target: ConfigMap, Actor: Editor, Token: NoToken,
		Patch: redated(addFinalizer("example.com/editor")), Want: protocol.ReasonTokenMissing,
		Why: "the apiserver keeps the times a write sends, and the time on the holder's entry that owns its marker or hold bounds how long the cluster's controllers wait for it"},
	{Name: "the Deployment controller redates the holder's managedFields entry with a free finalizer", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken,
		Patch: redated(addFinalizer("example.com/controller")), Want: protocol.ReasonTokenMissing,
		Why: "a controller past its wait must not keep every controller waiting on the next hold for the rest of the term"},
	{Name: "an editor lists finalizers a ConfigMap does not have in managedFields", Target: ConfigMap, Actor: Editor, Token: NoToken,
		Patch: fictitious, Want: protocol.ReasonTokenMissing,
		Why: "the apiserver keeps them, and every later write, the raise too, works through each: thousands fit in the byte bound"},
	{Name: "an editor annotates a ConfigMap", Target: ConfigMap, Actor: Editor, Token: NoToken, Patch: annotate("example.com/note", "x"),
		Want: protocol.ReasonTokenMissing, Why: "all of a covered object is the holder's, annotations too"},
	{Name: "an editor labels a ConfigMap out of the selector", Target: ConfigMap, Actor: Editor, Token: NoToken, Patch: label("app", nil),
		Want: protocol.ReasonTokenMissing, Why: "labels decide coverage"},
	{Name: "a stale holder labels a ConfigMap out of the selector", Target: ConfigMap, Actor: HolderUser, Token: StaleToken,
		Patch: label("app", nil), Want: protocol.ReasonStale, Why: "a write that changes coverage is decided on a quorum read"},
	{Name: "the holder keeps an armed marker on a ConfigMap", Target: ConfigMap, Actor: HolderUser, Token: CurrentToken,
		Setup: annotate(markerKey, marker), Raw: true, Patch: changeData},
	{Name: "an editor adds an owner to a ConfigMap", Target: ConfigMap, Actor: Editor, Token: NoToken, Patch: owners(ghost),
		Want: protocol.ReasonTokenMissing},
	{Name: "the garbage collector orphans a ConfigMap", Target: ConfigMap, Actor: GarbageCollector, Token: NoToken, Setup: owners(ghost),
		Patch: owners()},
	{Name: "the garbage collector deletes a dependent ConfigMap", Target: ConfigMap, Actor: GarbageCollector, Setup: owners(ghost),
		Op: admission.Delete, Why: "the owner references it acts on are fenced: the holder set them"},
	{Name: "the garbage collector deletes a ConfigMap without owners", Target: ConfigMap, Actor: GarbageCollector,
		Op: admission.Delete, Want: protocol.ReasonNotHolder, Why: "the collector deletes only dependents; an object without owners is not its to delete"},
	{Name: "the holder writes a ConfigMap after its release", Target: ConfigMap, Actor: HolderUser, Token: CurrentToken, Lease: Released,
		Patch: changeData, Want: protocol.ReasonNotHolder},
	{Name: "an editor deletes a ConfigMap", Target: ConfigMap, Actor: Editor, Op: admission.Delete, Want: protocol.ReasonNotHolder},
	{Name: "the holder's user deletes a ConfigMap without the marker", Target: ConfigMap, Actor: HolderUser, Op: admission.Delete,
		Want: protocol.ReasonTokenMissing},
	{Name: "the holder deletes a ConfigMap after its marker", Target: ConfigMap, Actor: HolderUser, Op: admission.Delete, Setup: annotate(markerKey, marker),
		Precondition: true},
	{Name: "the holder's user deletes a ConfigMap after the marker without a precondition", Target: ConfigMap, Actor: HolderUser,
		Op: admission.Delete, Setup: annotate(markerKey, marker), Want: protocol.ReasonTokenMissing},

	// A Deployment the same FencingPolicy covers, and the cluster's controllers.
	{Name: "the Deployment controller writes status", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Patch: status(7)},
	{Name: "the Deployment controller writes status while the holder's hold is armed", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Setup: annotate(fencingv1alpha1.HoldAtEpochAnnotation, marker), Patch: status(8), Want: protocol.ReasonTokenMissing,
		Why: "a storm of the cluster's status writes would make the holder's compare-and-swap retry lose for ever; they wait up to MaxClusterControllerHold after the hold is armed"},
	{Name: "the Deployment controller writes status while the holder's marker is armed", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Setup: annotate(markerKey, marker), Patch: status(8), Want: protocol.ReasonTokenMissing,
		Why: "the holder's DELETE's precondition is the marker write's resourceVersion"},
	{Name: "the Deployment controller writes the revision", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Patch: annotate("deployment.kubernetes.io/revision", "2")},
	{Name: "the Deployment controller annotates through status", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Patch: annotate("example.com/owner", "x"), Want: protocol.ReasonTokenMissing, Why: "the status exemption covers status only"},
	{Name: "another kube-system controller writes the revision", Target: Deployment, Actor: ReplicaSetCtrl, Token: NoToken, Subresource: "status",
		Patch: annotate("deployment.kubernetes.io/revision", "2"), Want: protocol.ReasonTokenMissing},
	{Name: "an editor writes status", Target: Deployment, Actor: Editor, Token: NoToken, Subresource: "status", Patch: status(7),
		Want: protocol.ReasonTokenMissing},
	{Name: "the Deployment controller lists many conditions in status", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Patch: conditions(admission.MaxFreePartEntries+1, 0),
		Why:   "the cluster's controllers have an allowance above the bounds: what they list follows the holder's spec (the Job controller lists up to 500 finished Pods)"},
	{Name: "the Deployment controller writes status once the bounds are full", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Setup: finalizers(admission.MaxFreePartEntries), Patch: status(7),
		Why: "a user without the token may fill the bounds with free finalizers, but not the controllers' allowance"},
	{Name: "the Deployment controller lists conditions past its allowance", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Patch: conditions(admission.MaxFreePartEntries+admission.MaxControllerPartEntries+1, 0), Want: protocol.ReasonInvalid,
		Why: "the allowance is bounded: a raise of the object must stay quick"},
	{Name: "the Deployment controller pads status", Target: Deployment, Actor: DeploymentCtrl, Token: NoToken, Subresource: "status",
		Patch: conditions(1, admission.MaxFreePartBytes+admission.MaxControllerPartBytes), Want: protocol.ReasonInvalid,
		Why: "the cluster's controllers are held to their bound in bytes too"},
	{Name: "the holder scales", Target: Deployment, Actor: HolderUser, Token: CurrentToken, Patch: replicas(2)},
	{Name: "a stale holder scales", Target: Deployment, Actor: HolderUser, Token: StaleToken, Patch: replicas(2), Want: protocol.ReasonStale},

	// The Lease, under the Lease policy.
	{Name: "the holder renews", Target: Lease, Actor: HolderUser, Token: CurrentToken, Patch: renew},
	{Name: "the holder's user renews without a token", Target: Lease, Actor: HolderUser, Token: NoToken, Patch: renew, Want: LeasePolicy,
		Why: "every acquire, renew and release presents the epoch it is made at"},
	{Name: "the holder drops the declaration", Target: Lease, Actor: HolderUser, Token: CurrentToken, Patch: declare(""), Want: LeasePolicy,
		Why: "the copy of the Lease relies on every later acquisition fencing the declared kinds"},
	{Name: "another elector takes the holder without a new epoch", Target: Lease, Actor: OtherElector, Token: CurrentToken,
		Patch: holderIs("intruder"), Want: LeasePolicy},
	{Name: "another elector acquires, declaring", Target: Lease, Actor: OtherElector, Token: FutureToken, Patch: acquire(true)},
	{Name: "another elector acquires, dropping the declaration", Target: Lease, Actor: OtherElector, Token: FutureToken, Patch: acquire(false),
		Want: LeasePolicy},
	{Name: "another elector annotates the Lease", Target: Lease, Actor: OtherElector, Token: NoToken, Patch: padLease(1024),
		Why: "other metadata is anyone's with RBAC on Leases"},
	{Name: "another elector pads the Lease's annotations past the bound", Target: Lease, Actor: OtherElector, Token: NoToken,
		Patch: padLease(258048 + 1), Want: LeasePolicy,
		Why: "labels and annotations other than fencekit's stay within 252 KiB: the next acquisition keeps its room (I2)"},
	{Name: "another elector pads the Lease's managedFields past the bound", Target: Lease, Actor: OtherElector, Token: NoToken,
		Patch: padLeaseManagedFields(admission.MaxFreeLeaseBytes), Want: protocol.ReasonInvalid,
		Why: "the apiserver keeps the managedFields entries a write sends, and CEL cannot measure them: the Lease webhook bounds the whole Lease (I2, I3)"},
	{Name: "another elector pads the Lease's managedFields within the bound", Target: Lease, Actor: OtherElector, Token: NoToken,
		Patch: padLeaseManagedFields(16 * 1024), Why: "other metadata is anyone's with RBAC on Leases, within one bound on the whole Lease"},
	{Name: "the holder adds an owner to its Lease", Target: Lease, Actor: HolderUser, Token: CurrentToken, Patch: owners(ghost),
		Want: LeasePolicy, Why: "an owner would let the garbage collector delete the Lease resources are bound to"},
}

// ghost is an owner that does not exist.
var ghost = map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": "00000000-0000-0000-0000-000000000001"}

// changeData sets the data of the target (a FencedResource's spec.data, a ConfigMap's data) to {"v": "b"}.
// nothing is an empty patch: the write is what Stamp adds.
func nothing(map[string]any) map[string]any { return map[string]any{} }

// raisedEpoch sets spec.raisedEpoch to e.
func raisedEpoch(e int64) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		return map[string]any{"spec": map[string]any{"raisedEpoch": e}}
	}
}

func changeData(stored map[string]any) map[string]any {
	if stored["kind"] == string(FencedResource) {
		return map[string]any{"spec": map[string]any{"data": map[string]any{"v": "b"}}}
	}
	return map[string]any{"data": map[string]any{"v": "b"}}
}

func replicas(n int64) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any { return map[string]any{"spec": map[string]any{"replicas": n}} }
}

func status(generation int64) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		return map[string]any{"status": map[string]any{"observedGeneration": generation}}
	}
}

// labels sets n labels.
func labels(n int) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		l := map[string]any{}
		for i := range n {
			l[fmt.Sprintf("l%03d", i)] = ""
		}
		return map[string]any{"metadata": map[string]any{"labels": l}}
	}
}

// fullStatus is a FencedResource's status with as many conditions as the CRD allows (8; fencekit's
// operator writes 3).
func fullStatus(map[string]any) map[string]any {
	var conds []any
	for _, ty := range []string{"Ready", "LeaseFound", "Fenced", "A", "B", "C", "D", "E"} {
		conds = append(conds, map[string]any{"type": ty, "status": "False", "reason": "LeaseNotFound",
			"message": "lease bench/writer not found", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": int64(1)})
	}
	return map[string]any{"status": map[string]any{"observedGeneration": int64(1), "conditions": conds}}
}

func label(k string, v any) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"labels": map[string]any{k: v}}}
	}
}

func annotate(k string, v any) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		if v == marker {
			v = currentEpoch(stored)
		}
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: v}}}
	}
}

// currentEpoch is the epoch the stored object was written at: a FencedResource's spec.epoch, an object's
// record.
func currentEpoch(stored map[string]any) string {
	if spec, ok := stored["spec"].(map[string]any); ok && stored["kind"] == string(FencedResource) {
		switch e := spec["epoch"].(type) {
		case int64:
			return itoa(e)
		case float64:
			return itoa(int64(e))
		}
	}
	md, _ := stored["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	s, _ := ann[recordKey].(string)
	return s
}

func finalizers(n int) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		f := make([]any, n)
		for i := range f {
			f[i] = fmt.Sprintf("example.com/f%d", i)
		}
		return map[string]any{"metadata": map[string]any{"finalizers": f}}
	}
}

// padFinalizers adds finalizers of the longest names the apiserver accepts (a 253-character prefix and a
// 63-character name) until they alone exceed admission.MaxFreeObjectBytes.
func padFinalizers(map[string]any) map[string]any {
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4)[:252] + "x"
	var f []any
	for n := 0; n <= admission.MaxFreeObjectBytes; n += 253 + 1 + 63 + 3 {
		f = append(f, fmt.Sprintf("%s/%063d", prefix, len(f)))
	}
	return map[string]any{"metadata": map[string]any{"finalizers": f}}
}

// padLabels adds labels of the longest keys and values the apiserver accepts until they alone exceed
// admission.MaxFreeObjectBytes.
func padLabels(map[string]any) map[string]any {
	prefix := strings.Repeat(strings.Repeat("p", 62)+".", 4)[:252] + "x"
	labels := map[string]any{}
	for n := 0; n <= admission.MaxFreeObjectBytes; n += 253 + 1 + 63 + 63 + 6 {
		labels[fmt.Sprintf("%s/%063d", prefix, len(labels))] = strings.Repeat("v", 63)
	}
	return map[string]any{"metadata": map[string]any{"labels": labels}}
}

// addFinalizer keeps the stored finalizers and adds name.
func addFinalizer(name string) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		f, _, _ := unstructured.NestedStringSlice(stored, "metadata", "finalizers")
		list := make([]any, 0, len(f)+1)
		for _, s := range f {
			list = append(list, s)
		}
		return map[string]any{"metadata": map[string]any{"finalizers": append(list, name)}}
	}
}

func owners(refs ...map[string]any) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		list := make([]any, len(refs))
		for i, r := range refs {
			list[i] = r
		}
		return map[string]any{"metadata": map[string]any{"ownerReferences": list}}
	}
}

// conditions sets status.conditions to n conditions of distinct types, each with a message of size bytes.
func conditions(n, size int) func(map[string]any) map[string]any {
	return func(map[string]any) map[string]any {
		list := make([]any, n)
		for i := range list {
			c := map[string]any{"type": fmt.Sprintf("c%04d", i), "status": "True"}
			if size > 0 {
				c["message"] = strings.Repeat("x", size)
			}
			list[i] = c
		}
		return map[string]any{"status": map[string]any{"conditions": list}}
	}
}

// mergeIntoAncient rewrites managedFields as the apiserver does when it merges an entry into its
// ancient-changes bucket: every epoch manager's Update entry goes into one "ancient-changes" entry of its
// API version, whole (whole) or without the finalizers it owns, with one free finalizer added by the
// write.
func mergeIntoAncient(whole bool) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		md, _ := stored["metadata"].(map[string]any)
		list, _ := md["managedFields"].([]any)
		var out []any
		bucket := map[string]any{}
		for _, raw := range list {
			e, _ := raw.(map[string]any)
			manager, _ := e["manager"].(string)
			if !strings.HasPrefix(manager, protocol.FieldManagerPrefix) || e["operation"] != "Update" {
				out = append(out, e)
				continue
			}
			f, _ := e["fieldsV1"].(map[string]any)
			for k, v := range f {
				if k == "f:metadata" && !whole {
					m := map[string]any{}
					for mk, mv := range v.(map[string]any) {
						if mk != "f:finalizers" {
							m[mk] = mv
						}
					}
					v = m
				}
				bucket[k] = mergeFields(bucket[k], v)
			}
		}
		out = append(out, map[string]any{"manager": admission.AncientChanges, "operation": "Update", "apiVersion": stored["apiVersion"],
			"fieldsType": "FieldsV1", "fieldsV1": bucket})
		fins, _ := md["finalizers"].([]any)
		return map[string]any{"metadata": map[string]any{"managedFields": out, "finalizers": append(append([]any(nil), fins...), "example.com/other")}}
	}
}

// redated is patch with the stored managedFields sent back, the time of every entry of a token moved to
// 2099.
func redated(patch func(map[string]any) map[string]any) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		out := patch(stored)
		list, _, _ := unstructured.NestedSlice(stored, "metadata", "managedFields")
		for _, raw := range list {
			if e, ok := raw.(map[string]any); ok && strings.HasPrefix(fmt.Sprint(e["manager"]), protocol.FieldManagerPrefix) {
				e["time"] = "2099-01-01T00:00:00Z"
			}
		}
		md, _ := out["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			out["metadata"] = md
		}
		md["managedFields"] = list
		return out
	}
}

// fictitious keeps the stored managedFields and adds an entry owning a finalizer the object does not have.
func fictitious(stored map[string]any) map[string]any {
	md, _ := stored["metadata"].(map[string]any)
	list, _ := md["managedFields"].([]any)
	out := append(append([]any(nil), list...), map[string]any{"manager": "pad", "operation": "Update", "apiVersion": stored["apiVersion"],
		"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{`v:"example.com/ghost"`: map[string]any{}}}}})
	return map[string]any{"metadata": map[string]any{"managedFields": out}}
}

// holderFinalizer adds finalizer name, owned by the holder's Update entry, as the apiserver records the
// holder's write of it.
func holderFinalizer(name string) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		md, _ := stored["metadata"].(map[string]any)
		list, _ := md["managedFields"].([]any)
		out := make([]any, 0, len(list))
		owned := map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{"v:\"" + name + "\"": map[string]any{}, ".": map[string]any{}}}}
		for _, raw := range list {
			e, _ := raw.(map[string]any)
			if manager, _ := e["manager"].(string); strings.HasPrefix(manager, protocol.FieldManagerPrefix) && e["operation"] == "Update" {
				c := map[string]any{}
				for k, v := range e {
					c[k] = v
				}
				c["fieldsV1"] = mergeFields(e["fieldsV1"], owned)
				e = c
			}
			out = append(out, e)
		}
		fins, _ := md["finalizers"].([]any)
		return map[string]any{"metadata": map[string]any{"managedFields": out, "finalizers": append(append([]any(nil), fins...), name)}}
	}
}

// mergeFields is the union of two fieldsV1 trees.
func mergeFields(a, b any) any {
	am, _ := a.(map[string]any)
	bm, _ := b.(map[string]any)
	out := map[string]any{}
	for k, v := range am {
		out[k] = v
	}
	for k, v := range bm {
		out[k] = mergeFields(out[k], v)
	}
	return out
}

// marker is the deletion marker at the current epoch, as the stored record says it.
const marker = "<the record>"

// stealOwnership moves ownership of the data out of every managedFields entry into a new Apply entry of
// the holder's epoch manager, as a write that changes nothing but managedFields can.
func stealOwnership(stored map[string]any) map[string]any {
	md, _ := stored["metadata"].(map[string]any)
	list, _ := md["managedFields"].([]any)
	out := make([]any, 0, len(list)+1)
	for _, raw := range list {
		e, _ := raw.(map[string]any)
		c := map[string]any{}
		for k, v := range e {
			c[k] = v
		}
		if f, ok := c["fieldsV1"].(map[string]any); ok {
			c["fieldsV1"] = withoutData(f)
		}
		out = append(out, c)
	}
	owned := map[string]any{"f:data": map[string]any{"f:v": map[string]any{}}}
	if stored["kind"] == string(FencedResource) {
		owned = map[string]any{"f:spec": map[string]any{"f:data": map[string]any{}}}
	}
	out = append(out, map[string]any{"manager": protocol.FieldManagerFor(Current), "operation": "Apply",
		"apiVersion": stored["apiVersion"], "fieldsType": "FieldsV1", "fieldsV1": owned})
	return map[string]any{"metadata": map[string]any{"managedFields": out}}
}

// withoutData is a managedFields fieldsV1 without the data it owns.
func withoutData(f map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range f {
		switch k {
		case "f:data":
			continue
		case "f:spec":
			if s, ok := v.(map[string]any); ok {
				s2 := map[string]any{}
				for sk, sv := range s {
					if sk != "f:data" {
						s2[sk] = sv
					}
				}
				v = s2
			}
		}
		c[k] = v
	}
	return c
}

func renew(stored map[string]any) map[string]any {
	return map[string]any{"spec": map[string]any{"renewTime": nextRenewTime(stored)}}
}

func holderIs(h string) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		return map[string]any{"spec": map[string]any{"holderIdentity": h, "renewTime": nextRenewTime(stored)}}
	}
}

// padLease adds annotation example.com/pad, sized so that the Lease's labels and annotations other than
// fencekit's take n bytes.
func padLease(n int) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		md, _ := stored["metadata"].(map[string]any)
		have := 0
		for _, field := range []string{"labels", "annotations"} {
			m, _ := md[field].(map[string]any)
			for k, v := range m {
				if field == "annotations" && (k == protocol.EpochAnnotation || k == protocol.AcquirerAnnotation || k == protocol.FencesAnnotation) {
					continue
				}
				s, _ := v.(string)
				have += len(k) + len(s)
			}
		}
		const key = "example.com/pad"
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: strings.Repeat("x", n-have-len(key))}}}
	}
}

// padLeaseManagedFields adds to the Lease's managedFields an entry of manager "pad" owning annotations the
// Lease does not have, more than n bytes of them.
func padLeaseManagedFields(n int) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		md, _ := stored["metadata"].(map[string]any)
		entries, _ := md["managedFields"].([]any)
		owned := map[string]any{}
		for i := 0; i*32 < n; i++ {
			owned[fmt.Sprintf("f:example.com/pad-%020d", i)] = map[string]any{}
		}
		pad := map[string]any{"manager": "pad", "operation": "Update", "apiVersion": "coordination.k8s.io/v1", "fieldsType": "FieldsV1",
			"fieldsV1": map[string]any{"f:metadata": map[string]any{"f:annotations": owned}}}
		return map[string]any{"metadata": map[string]any{"managedFields": append(append([]any{}, entries...), pad)}}
	}
}

func declare(fences string) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		var v any = fences
		if fences == "" {
			v = nil
		}
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{protocol.FencesAnnotation: v}},
			"spec": map[string]any{"renewTime": nextRenewTime(stored)}}
	}
}

// acquire is another elector's acquisition at the next epoch (the row's FutureToken), as pkg/elector
// writes it, with or without the declaration the Lease carries.
func acquire(declaring bool) func(map[string]any) map[string]any {
	return func(stored map[string]any) map[string]any {
		var fences any
		if declaring {
			fences = protocol.Fences{FencedResources: true, Objects: true}.String()
		}
		md, _ := stored["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		epoch, _ := strconv.ParseInt(fmt.Sprint(ann[protocol.EpochAnnotation]), 10, 64)
		return map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{protocol.EpochAnnotation: itoa(epoch + 1),
				protocol.AcquirerAnnotation: string(OtherElector), protocol.FencesAnnotation: fences}},
			"spec": map[string]any{"holderIdentity": "intruder", "acquireTime": nextRenewTime(stored), "renewTime": nextRenewTime(stored)},
		}
	}
}

// nextRenewTime is the renewTime a renewal writes: now, as the elector writes it (the Lease rows run on
// the apiserver only, at the time they run).
func nextRenewTime(map[string]any) string { return time.Now().UTC().Format(metav1.RFC3339Micro) }
