package admission

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// MaxFreeObjectBytes bounds a fenced object after a write without the token that grows it: its whole
// serialized form (JSON, as the apiserver hands it to admission), managedFields included. A write without
// the token may leave the object larger than it was only while it stays within this bound, so whatever
// such writes add (finalizers, a FencedResource's labels and annotations, managedFields entries listing
// free fields again and again), the object is never more than the larger of what the holder wrote and
// this bound. etcd's request limit (1.5 MiB, --max-request-bytes) minus this bound is the room the holder's
// next write keeps: at least 1 MiB, more than a FencedResource's data (MaxDataBytes, 256 KiB) and the
// managedFields entry that lists its keys. It matters most for server-side apply: the apiserver retries an
// update or a patch whose result is too large without managedFields, but not an apply, which then fails
// with "etcdserver: request is too large".
const MaxFreeObjectBytes = 512 * 1024

// MaxFreePartBytes and MaxFreePartEntries bound what writes without the token may add to a fenced object
// besides its content: its labels, annotations, finalizers, owner references, status and the managedFields
// entries of field managers other than the holder's epoch managers (fencing.fencekit.io/epoch=N), in bytes
// (JSON) and in entries (labels, annotations, finalizers, owner references, the elements of every list in
// status, managedFields entries). A write without the token, the cluster's own controllers' included, may
// leave either larger than it was only while it stays within its bound. Every acquisition raises every
// object a holder wrote (pkg/fencing's fence-on-acquire), and a raise costs the apiserver time in
// proportion to the object's size and to the number of fields it tracks: without these bounds, a user
// without the token (or a kubelet, on its own node's Pods) could pad each of the holder's objects (with
// bytes, or with thousands of tiny finalizers, labels or conditions) and make the next acquisition miss
// its deadline (I3). The holder's own managedFields entries are not counted (its labels, annotations and
// finalizers are); of the apiserver's "ancient-changes" bucket, which receives the holder's oldest entries
// with others', only what it owns of metadata and status, where padding can be, is counted.
const (
	MaxFreePartBytes   = 64 * 1024
	MaxFreePartEntries = 128
)

// The cluster's own controllers have an allowance above MaxFreePartBytes and MaxFreePartEntries: a write of
// theirs without the token is bounded by the sums. What they write follows the holder's spec (the Job
// controller lists up to 500 finished Pods' UIDs in status.uncountedTerminatedPods, a kubelet one status
// per container and volume mount), and a user without the token, who may fill the lower bounds with free
// finalizers, labels and annotations, cannot spend the allowance: the controllers' normal writes (a
// status, the apiserver's count of a PodDisruptionBudget during an eviction) still go through.
// kube-controller-manager's controllers, whose lists are the longest, have MaxControllerPartBytes and
// MaxControllerPartEntries; kubelets (a node's credential may be compromised, and writes the status of
// every Pod on its node), kube-scheduler and the apiserver MaxNodePartBytes and MaxNodePartEntries. A raise
// costs with the number of fields an object tracks: 60 holder-written Pods padded by a kubelet with 688
// tiny conditions (what 128 KiB holds) took the fence 8.1 s, so a kubelet's allowance stays small.
const (
	MaxControllerPartBytes   = 64 * 1024
	MaxControllerPartEntries = 1024
	MaxNodePartBytes         = 16 * 1024
	MaxNodePartEntries       = 64
)

// fencekit's operator writes each FencedResource's status (the conditions Ready, LeaseFound and Fenced,
// what it observed of the Lease) and has an allowance above MaxFreePartBytes and MaxFreePartEntries for
// those writes: without it, a user who may create FencedResources could declare one with labels up to the
// bounds and hide its status (whether it is fenced) from every admin who reads it. The CRD bounds the
// status (at most 8 conditions); the allowance holds them and the operator's managedFields entry, and no
// other user can spend it.
const (
	MaxOperatorPartBytes   = 16 * 1024
	MaxOperatorPartEntries = 16
)

// operatorStatus reports whether r is fencekit's operator writing a FencedResource's status: it has an
// allowance above the bounds, and, as the cluster's controllers, may take the status fields it owned
// back from the apiserver's "ancient-changes" bucket, where anyone's eleven writes can merge its entry.
func (r *Request) operatorStatus() bool {
	return r.User.Operator && r.Class == FencedResource && r.Subresource == "status"
}

// part is the measure of what writes without the token may add to an object.
type part struct{ bytes, entries int }

// bounds is the bound on part for r, a write without the token.
func bounds(r *Request) part {
	u := r.User
	switch {
	case r.operatorStatus():
		return part{bytes: MaxFreePartBytes + MaxOperatorPartBytes, entries: MaxFreePartEntries + MaxOperatorPartEntries}
	case u.kubeControllerManager():
		return part{bytes: MaxFreePartBytes + MaxControllerPartBytes, entries: MaxFreePartEntries + MaxControllerPartEntries}
	case u.clusterController():
		return part{bytes: MaxFreePartBytes + MaxNodePartBytes, entries: MaxFreePartEntries + MaxNodePartEntries}
	}
	return part{bytes: MaxFreePartBytes, entries: MaxFreePartEntries}
}

// freePart measures u's labels, annotations, finalizers, owner references, status and the managedFields
// entries of managers other than epoch managers.
func freePart(u *unstructured.Unstructured) part {
	if u == nil {
		return part{}
	}
	var p part
	md, _ := u.Object["metadata"].(map[string]any)
	for _, k := range []string{"labels", "annotations", "finalizers", "ownerReferences"} {
		switch v := md[k].(type) {
		case map[string]any:
			p.entries += len(v)
			p.bytes += jsonSize(v)
		case []any:
			p.entries += len(v)
			p.bytes += jsonSize(v)
		}
	}
	if mf, ok := md["managedFields"].([]any); ok {
		for _, e := range mf {
			m, _ := e.(map[string]any)
			manager, _ := m["manager"].(string)
			switch {
			case strings.HasPrefix(manager, protocol.FieldManagerPrefix):
				continue
			case manager == AncientChanges:
				p.bytes += paddable(m["fieldsV1"])
			default:
				p.bytes += jsonSize(e)
			}
			p.entries++
		}
	}
	if status, ok := u.Object["status"]; ok {
		p.bytes += jsonSize(status)
		p.entries += listElements(status)
	}
	return p
}

// paddable is the size of what a fieldsV1 set owns of metadata's labels, annotations, finalizers and
// owner references and of status.
func paddable(fields any) int {
	f, _ := fields.(map[string]any)
	n := jsonSize(f["f:status"])
	md, _ := f["f:metadata"].(map[string]any)
	for _, k := range []string{"f:labels", "f:annotations", "f:finalizers", "f:ownerReferences"} {
		n += jsonSize(md[k])
	}
	return n
}

// listElements counts the elements of every list in v, nested ones included.
func listElements(v any) int {
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			n += listElements(e)
		}
	case []any:
		n += len(v)
		for _, e := range v {
			n += listElements(e)
		}
	}
	return n
}

// MaxFreeAnnotationBytes bounds a fenced object's annotations (the sum of their keys' and values' lengths,
// as the apiserver counts them) after a write without the token that grows them: the apiserver refuses an
// object whose annotations pass 256 KiB, so a write without the token must leave room for fencekit's own
// (the writer, the epoch record, the deletion marker, the hold: a few hundred bytes), or the holder's next
// write and fence-on-acquire's raise, which add them, would fail.
const MaxFreeAnnotationBytes = 256*1024 - 4*1024

// annotationBytes is the size of u's annotations as the apiserver counts it.
func annotationBytes(u *unstructured.Unstructured) int {
	if u == nil {
		return 0
	}
	n := 0
	for k, v := range u.GetAnnotations() {
		n += len(k) + len(v)
	}
	return n
}

// LastAppliedAnnotation is kubectl's record of a client-side apply (kubectl apply without --server-side):
// the next apply deletes what it lists and the new configuration does not, so it is ownership, as
// managedFields are for a server-side apply.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// freeRule is one entry of the allowlist: a field a write may change without presenting the token, for
// whom, and the reason a stale or non-holder writer cannot use it to change data, ownership, coverage or
// the holder's next write.
type freeRule struct {
	name string
	// frees reports whether the rule lets request r change path p.
	frees func(r *Request, p Path) bool
	why   string
}

// apiserverKept reports whether p is metadata the apiserver sets itself (a Deployment's generation, for
// one, rises with any change of its annotations), which no request chooses.
func apiserverKept(p Path) bool {
	return len(p) == 2 && p.under("metadata") && slices.Contains([]string{"resourceVersion", "generation", "uid",
		"creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"}, p[1])
}

// allowlist is every way a write without the token may change a fenced object. Anything else is refused:
// deny by default. Each entry has an attack test on the real apiserver (test/admission), named in
// docs/design/allowlist.md, and the automatic attacker (test/attack) tries them all at random.
var allowlist = []freeRule{{
	name: "apiserver-kept metadata",
	frees: func(_ *Request, p Path) bool {
		return apiserverKept(p)
	},
	why: "the apiserver sets these itself; a request cannot choose them",
}, {
	name: "finalizers",
	frees: func(r *Request, p Path) bool {
		return p.under("metadata", "finalizers") && (sameDeletionFinalizers(r.Old, r.New) || r.collectsGarbage())
	},
	why: "a finalizer only delays the removal of an object whose deletion was already admitted: it changes " +
		"no data, no owner, no label, and nothing the holder's next write sends. Not orphan and " +
		"foregroundDeletion: they decide what the garbage collector does with the dependents when the object " +
		"is deleted (the holder's DELETE without options follows them), so adding or removing one needs the " +
		"token; only the garbage collector removes them, from an object being deleted, when it has done what " +
		"they ask",
}, {
	name: "a FencedResource's declaration",
	frees: func(r *Request, p Path) bool {
		if r.Class != FencedResource {
			return false
		}
		switch {
		case p.under("metadata", "labels"), p.under("spec", "leaseName"):
			return true
		case p.under("metadata", "annotations"):
			return len(p) < 3 || !strings.HasPrefix(p[2], "fencing.fencekit.io/") && p[2] != LastAppliedAnnotation
		case r.Operation == Create:
			epoch, _, _ := unstructured.NestedInt64(r.New.Object, "spec", "epoch")
			return p.under("metadata", "name") || p.under("metadata", "generateName") || p.under("metadata", "namespace") ||
				(p.under("spec", "epoch") && epoch == 0)
		}
		return false
	},
	why: "a FencedResource's data is spec.data, its epoch spec.epoch, its writer and deletion marker " +
		"fencekit's annotations; fencekit reads no other label or annotation (but kubectl's last-applied " +
		"configuration, which decides what the holder's client-side apply deletes), its Lease (spec.leaseName) is " +
		"immutable (the CRD's CEL rule), and a create holds no data and epoch 0: declaring is free, writing is fenced. " +
		"Owner references are fenced, on create too: an owner deletes, and one the creator controls would let it " +
		"have the garbage collector delete the holder's data. Labels and annotations are bounded by MaxFreePartBytes",
}, {
	name: "a FencedResource's status",
	frees: func(r *Request, p Path) bool {
		return r.Class == FencedResource && r.Subresource == "status" && p.under("status")
	},
	why: "a FencedResource's status is the operator's report on it (its Fenced condition, the epoch it saw): " +
		"fencekit decides no write on it, and a status write cannot change the data, the epoch, labels or owners. " +
		"Like every write without the token it waits while the holder's delete or compare-and-swap write is " +
		"pending (held) and is bounded in size",
}, {
	name: "cluster controllers' status",
	frees: func(r *Request, p Path) bool {
		return r.Class == Object && r.Subresource == "status" && r.User.clusterController() && p.under("status")
	},
	why: "a covered object's status is what the cluster's own controllers observe (a Deployment's replicas, " +
		"a Job's completions) and what the apiserver itself counts (a budget's disruptions on an eviction, a " +
		"quota's usage on a create); only those credentials write it here, and a status write cannot " +
		"change the object's spec, data, labels or owners",
}, {
	name: "the Deployment controller's revision",
	frees: func(r *Request, p Path) bool {
		return r.Class == Object && r.Kind == "Deployment" && r.Subresource == "status" &&
			r.User.is(DeploymentControllerUser) &&
			slices.Equal(p, Path{"metadata", "annotations", "deployment.kubernetes.io/revision"})
	},
	why: "the Deployment controller numbers a Deployment's rollouts in this annotation, written through " +
		"deployments/status since Kubernetes 1.37; it is derived from the ReplicaSets, and no other user may " +
		"write it without the token",
}, {
	name: "the scheduler's binding",
	frees: func(r *Request, p Path) bool {
		// The apiserver copies a Binding's annotations onto the Pod: they are not the binding's to set.
		if r.Class != Object || r.Subresource != "binding" || r.New == nil || p.under("metadata", "annotations") {
			return false
		}
		node, _, _ := unstructured.NestedString(r.New.Object, "target", "name")
		return r.User.bindsPods(node)
	},
	why: "a Binding assigns a Pod to a node and nothing else; only the scheduler (or a kubelet, to its own " +
		"node) makes one",
}, {
	name: "the garbage collector's orphaning",
	frees: func(r *Request, p Path) bool {
		return r.User.is(GarbageCollectorUser) && r.Operation == Update && r.Subresource == "" &&
			p.under("metadata", "ownerReferences") && onlyRemovesOwners(r.Old, r.New)
	},
	why: "removing owner references (orphaning, or dropping a dangling owner) deletes nothing and changes " +
		"no data; adding or changing one is fenced, because an owner deletes",
}, {
	name: "the volume binder's binding of a claim",
	frees: func(r *Request, p Path) bool {
		if r.Class != Object || r.Kind != "PersistentVolumeClaim" || r.Operation != Update || r.Old == nil || r.Subresource != "" ||
			!r.User.is(VolumeBinderUser) {
			return false
		}
		if slices.Equal(p, Path{"spec", "volumeName"}) {
			old, _, _ := unstructured.NestedString(r.Old.Object, "spec", "volumeName")
			return old == "" // binding an unbound claim; never rebinding a bound one
		}
		return len(p) == 3 && p.under("metadata", "annotations") && slices.Contains([]string{"pv.kubernetes.io/bind-completed",
			"pv.kubernetes.io/bound-by-controller", "volume.beta.kubernetes.io/storage-provisioner", "volume.kubernetes.io/storage-provisioner"}, p[2])
	},
	why: "the persistent-volume binder binds an unbound claim to a volume (spec.volumeName, and the annotations " +
		"that record the binding); the claim's request, its data and its labels stay the holder's, and a bound claim " +
		"cannot be rebound this way. Without it the volume shows Bound to the claim while the claim stays Pending",
}, {
	name: "the scheduler's selected node for a claim",
	frees: func(r *Request, p Path) bool {
		return r.Class == Object && r.Kind == "PersistentVolumeClaim" && r.Operation == Update && r.Subresource == "" &&
			r.User.Name == SchedulerUser && slices.Equal(p, Path{"metadata", "annotations", selectedNodeAnnotation})
	},
	why: "for a claim of a StorageClass that waits for its first consumer, kube-scheduler records the node it " +
		"picked for the Pod (and removes it to pick again), so that the volume is provisioned where the Pod runs; " +
		"it names a node, not the claim's data, labels or owners, and only the scheduler writes it without the token",
}, {
	name: "the token controller's ServiceAccount token",
	frees: func(r *Request, p Path) bool {
		if r.Class != Object || r.Kind != "Secret" || r.Subresource != "" || !r.User.is(TokenControllerUser) ||
			r.Old == nil || secretType(r.Old) != "kubernetes.io/service-account-token" {
			return false
		}
		if len(p) == 2 && p.under("data") && slices.Contains([]string{"token", "ca.crt", "namespace"}, p[1]) {
			return true
		}
		// The ServiceAccount's uid, which the controller records once; never its name, which the holder
		// chose (it says whose token the Secret holds).
		_, had := r.Old.GetAnnotations()[uidAnnotation]
		return !had && slices.Equal(p, Path{"metadata", "annotations", uidAnnotation})
	},
	why: "a Secret of type kubernetes.io/service-account-token (a type that cannot change) is filled by the " +
		"token controller with a token it mints for the ServiceAccount the Secret names (and that ServiceAccount's " +
		"uid, once); nobody else can write those keys without the token, and the Secret's other data, and the " +
		"ServiceAccount it names, stay the holder's",
}}

// selectedNodeAnnotation is where kube-scheduler records the node it picked for a claim's Pod.
const selectedNodeAnnotation = "volume.kubernetes.io/selected-node"

// uidAnnotation is where the token controller records the uid of a token Secret's ServiceAccount.
const uidAnnotation = "kubernetes.io/service-account.uid"

// secretType is a Secret's type.
func secretType(u *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(u.Object, "type")
	return s
}

// freeFor returns the test a path must pass to be changed by r without the token.
func freeFor(r *Request) func(Path) bool {
	return func(p Path) bool {
		return slices.ContainsFunc(allowlist, func(f freeRule) bool { return f.frees(r, p) })
	}
}

func onlyRemovesOwners(old, updated *unstructured.Unstructured) bool {
	if old == nil || updated == nil {
		return false
	}
	o, n := old.GetOwnerReferences(), updated.GetOwnerReferences()
	if len(n) >= len(o) {
		return false
	}
	i := 0
	for _, ref := range n {
		for i < len(o) && !reflect.DeepEqual(o[i], ref) {
			i++
		}
		if i == len(o) {
			return false
		}
		i++
	}
	return true
}

// The finalizers that decide what the garbage collector does with an object's dependents when the object
// is deleted (metav1.FinalizerOrphanDependents, metav1.FinalizerDeleteDependents).
const (
	orphanFinalizer     = "orphan"
	foregroundFinalizer = "foregroundDeletion"
)

// deletionFinalizers reports which of the two deletion finalizers u holds.
func deletionFinalizers(u *unstructured.Unstructured) (orphan, foreground bool) {
	if u == nil {
		return false, false
	}
	fs := u.GetFinalizers()
	return slices.Contains(fs, orphanFinalizer), slices.Contains(fs, foregroundFinalizer)
}

// sameDeletionFinalizers reports whether old and updated hold the same deletion finalizers.
func sameDeletionFinalizers(old, updated *unstructured.Unstructured) bool {
	o1, f1 := deletionFinalizers(old)
	o2, f2 := deletionFinalizers(updated)
	return o1 == o2 && f1 == f2
}

// collectsGarbage reports whether r is the garbage collector removing deletion finalizers (and nothing
// else of the finalizers) from an object being deleted: it does so once it has orphaned or deleted the
// dependents, as the holder's delete asked.
func (r *Request) collectsGarbage() bool {
	if !r.User.is(GarbageCollectorUser) || r.Operation != Update || r.Old == nil || r.New == nil || r.Old.GetDeletionTimestamp() == nil {
		return false
	}
	o1, f1 := deletionFinalizers(r.Old)
	o2, f2 := deletionFinalizers(r.New)
	return (!o2 || o1) && (!f2 || f1)
}

// objectBytes is the size of u serialized as JSON: n when the webhook measured it (the request's bytes),
// otherwise u encoded again; 0 for no object.
func objectBytes(u *unstructured.Unstructured, n int) int {
	if u == nil {
		return 0
	}
	if n > 0 {
		return n
	}
	return jsonSize(u.Object)
}

// Path is a field of an object, as a list of map keys from the top: {"metadata", "labels", "app"}.
type Path []string

// String renders p as refusals name it: "spec.data.orders", "metadata.annotations[example.com/x]".
func (p Path) String() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case strings.ContainsAny(s, "./[]") || s == "":
			b.WriteString("[" + s + "]")
		case i > 0:
			b.WriteString("." + s)
		default:
			b.WriteString(s)
		}
	}
	return b.String()
}

// under reports whether p is prefix or below it.
func (p Path) under(prefix ...string) bool {
	return len(p) >= len(prefix) && slices.Equal(p[:len(prefix)], prefix)
}

// managedFieldsPath is left out of changedPaths: the rule reads it as ownership (ownershipChanges).
var managedFieldsPath = Path{"metadata", "managedFields"}

// changedPaths lists the leaves that differ between old and updated (either may be nil), in key order: maps
// are compared key by key, anything else (strings, numbers, lists) as a whole. An absent value, null, an
// empty map and an empty list count as the same; "" and 0 do not (they are values). apiVersion and kind
// are not fields of the object, and metadata.managedFields is left to the ownership rule.
func changedPaths(old, updated map[string]any) []Path {
	var out []Path
	diffMaps(nil, old, updated, &out)
	return out
}

func diffMaps(at Path, old, updated map[string]any, out *[]Path) {
	for _, k := range unionKeys(old, updated) {
		if len(at) == 0 && (k == "apiVersion" || k == "kind") {
			continue
		}
		p := append(slices.Clip(at), k)
		if slices.Equal(p, managedFieldsPath) {
			continue
		}
		o, n := old[k], updated[k]
		om, oIsMap := o.(map[string]any)
		nm, nIsMap := n.(map[string]any)
		switch {
		case oIsMap && nIsMap, oIsMap && absent(n), nIsMap && absent(o):
			diffMaps(p, om, nm, out)
		case absent(o) && absent(n):
		case !reflect.DeepEqual(o, n):
			*out = append(*out, p)
		}
	}
}

// absent reports whether v is missing, null, an empty map or an empty list.
func absent(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

func unionKeys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// listPaths renders up to limit paths for a message, saying how many more there are.
func listPaths(ps []Path, limit int) string {
	var s []string
	for i, p := range ps {
		if i == limit {
			s = append(s, "and "+strconv.Itoa(len(ps)-limit)+" more")
			break
		}
		s = append(s, p.String())
	}
	return strings.Join(s, ", ")
}

// entry is one managedFields entry: who owns which fields.
type entry struct {
	manager, operation, subresource, apiVersion string
	fields                                      *fieldpath.Set
	// time is the time the apiserver recorded on the entry, as the object holds it ("" for none).
	time string
}

// id names the entry as the apiserver tells entries apart.
func (e entry) id() string {
	return strings.Join([]string{e.manager, e.operation, e.subresource, e.apiVersion}, "\x00")
}

func (e entry) String() string {
	s := fmt.Sprintf("manager %q (%s", e.manager, e.operation)
	if e.subresource != "" {
		s += ", subresource " + e.subresource
	}
	return s + ")"
}

// epochManager reports whether the entry is a fenced writer's: its manager is a token.
func (e entry) epochManager() bool { return strings.HasPrefix(e.manager, protocol.FieldManagerPrefix) }

// AncientChanges is the manager the apiserver merges an object's oldest Update entries into once it has
// more than ten of them (k8s.io/apiserver's fieldmanager, "ancient-changes"): one per API version.
const AncientChanges = "ancient-changes"

// ancient reports whether the entry is the apiserver's bucket of merged Update entries.
func (e entry) ancient() bool {
	return e.manager == AncientChanges && e.operation == "Update" && e.subresource == ""
}

// holders reports whether the entry may own what a holder wrote: an epoch manager's, or the bucket the
// apiserver merges old entries into, which receives a holder's entries once ten others are newer (a
// holder's writes at eleven epochs are enough). The rule keeps both as it keeps the holder's.
func (e entry) holders() bool { return e.epochManager() || e.ancient() }

// entries reads u's metadata.managedFields. An entry that cannot be read is an error: the rule cannot
// say what it owns, so it refuses (fail closed).
func entries(u *unstructured.Unstructured) (map[string]entry, error) {
	out := map[string]entry{}
	if u == nil {
		return out, nil
	}
	list, _, err := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
	if err != nil {
		return nil, err
	}
	for i, raw := range list {
		m, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("managedFields[%d] is not an object", i)
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		e := entry{manager: str("manager"), operation: str("operation"), subresource: str("subresource"),
			apiVersion: str("apiVersion"), fields: fieldpath.NewSet(), time: str("time")}
		if f, ok := m["fieldsV1"]; ok && f != nil {
			b, err := json.Marshal(f)
			if err != nil {
				return nil, err
			}
			set := fieldpath.NewSet()
			if err := set.FromJSON(bytes.NewReader(b)); err != nil {
				return nil, fmt.Errorf("managedFields[%d] (manager %q): %w", i, e.manager, err)
			}
			// The fields, not the maps that hold them: owning "spec" as a map that holds leaseName is
			// owning leaseName.
			e.fields = set.Leaves()
		}
		out[e.id()] = e
	}
	return out, nil
}

// mergedWriter names the entry undoMerges gives back what the apiserver merged of the writer's own entry;
// its operation, mergedOperation, is one no request can send (the apiserver accepts Apply and Update
// only), so that no entry a write sends can stand in its place.
const (
	mergedWriter    = "(this write's own entry, merged by the apiserver into " + AncientChanges + ")"
	mergedOperation = "Update, merged"
)

// undoMerges returns after as it was before the apiserver merged entries into its "ancient-changes"
// buckets. The apiserver merges after admission sees nothing of the writer: on any write that adds an
// Update entry to an object that has ten, its oldest entries (by the second they were written, then by
// name) until ten are left, the writer's own new entry included when it sorts first. So:
//   - an Update entry of before that after lacks, and whose fields the bucket of its API version holds, is
//     put back, and the bucket keeps only what it held before and gained otherwise;
//   - when the write brought the object to the cap, what the bucket gained otherwise is the writer's own
//     entry's, and is given back to an entry of the writer's (mergedWriter), judged as any entry a write
//     adds.
//
// Whatever such a merge moves stays with a holder's entry (holders), so the write is judged on what the
// writer changed; an entry merged whose fields the bucket does not hold is judged as removed. (A writer
// whose entry sorts before the bucket itself makes the apiserver drop the bucket, and what it owned with
// it: such a write is judged as removing the bucket.)
func undoMerges(before, after map[string]entry) map[string]entry {
	var out map[string]entry
	capped := updates(after) == fencing.MaxUpdateEntries && updates(before) >= fencing.MaxUpdateEntries
	for id, a := range after {
		if !a.ancient() {
			continue
		}
		merged := fieldpath.NewSet()
		for bid, b := range before {
			if _, kept := after[bid]; kept || b.ancient() || b.operation != "Update" || b.apiVersion != a.apiVersion || b.fields.Empty() || !holds(a.fields, b.fields) {
				continue
			}
			if out == nil {
				out = maps.Clone(after)
			}
			out[bid] = b
			merged = merged.Union(b.fields)
		}
		held := fieldpath.NewSet()
		if b, ok := before[id]; ok {
			held = b.fields
		}
		writers := fieldpath.NewSet()
		if capped {
			writers = a.fields.Difference(held).Difference(merged)
		}
		if merged.Empty() && writers.Empty() {
			continue
		}
		if out == nil {
			out = maps.Clone(after)
		}
		a.fields = a.fields.Difference(merged.Difference(held)).Difference(writers)
		if _, existed := before[id]; !existed && a.fields.Empty() {
			delete(out, id)
		} else {
			out[id] = a
		}
		if !writers.Empty() {
			w := entry{manager: mergedWriter, operation: mergedOperation, apiVersion: a.apiVersion, fields: writers}
			out[w.id()] = w
		}
	}
	if out == nil {
		return after
	}
	return out
}

// updates counts the Update entries.
func updates(es map[string]entry) int {
	n := 0
	for _, e := range es {
		if e.operation == "Update" {
			n++
		}
	}
	return n
}

// holds reports whether the bucket's fields hold every field of b: as a field, or as a map that holds
// others. An entry that owned a map as a leaf (an empty "f:annotations" left to the creating entry once a
// raise took the key it held) is merged into a bucket where the map holds keys of other entries, and is
// no longer a leaf there.
func holds(bucket, b *fieldpath.Set) bool {
	inner := fieldpath.NewSet()
	bucket.Iterate(func(p fieldpath.Path) {
		for i := 1; i < len(p); i++ {
			inner.Insert(p[:i].Copy())
		}
	})
	ok := true
	b.Iterate(func(p fieldpath.Path) {
		if ok && !bucket.Has(p) && !inner.Has(p) {
			ok = false
		}
	})
	return ok
}

// asPath is a field path as the allowlist reads it: its field names, up to the first list element (a
// finalizer, an owner reference), which stands for the whole list.
func asPath(p fieldpath.Path) Path {
	out := make(Path, 0, len(p))
	for _, pe := range p {
		if pe.FieldName == nil {
			break
		}
		out = append(out, *pe.FieldName)
	}
	return out
}

// ownershipChange is a change of managedFields that a write without the token may not make.
type ownershipChange struct {
	entry entry
	path  Path
	why   string
}

// ownershipChanges checks the managedFields of a write without the token: ownership may move only
// within the paths free says the write may change. In particular:
//   - no entry may gain or lose a field outside them (the holder's next server-side apply prunes a field
//     only its own Apply entry owns: moving ownership of data away from another manager deletes data);
//   - a holder's entry (an epoch manager's, or the apiserver's "ancient-changes" bucket that receives the
//     oldest: holders) may not gain anything, not even a free field;
//   - an added entry may not be a holder's;
//   - no entry may gain a field the object does not have: the apiserver keeps what a write sends in
//     managedFields, and every later write of the object, a raise too, works through every field listed;
//   - a holder's entry may not lose anything, not even a free field, but to the cluster's own
//     controllers (controller): what the holder wrote is the holder's, a finalizer it set (its cleanup) too;
//   - an entry of a token keeps its time: the apiserver keeps the times a write sends, and the time on the
//     entry that owns a deletion marker or hold is when the holder armed it (armedAt), which bounds how long
//     the cluster's controllers wait for it;
//   - no entry may gain ownership of the finalizer orphan or foregroundDeletion, even one the object
//     already has: a co-owner keeps it through the holder's apply that drops it, and it decides what the
//     holder's delete does with the dependents (I4).
//
// The apiserver's own merges into "ancient-changes" are undone first (undoMerges): they move ownership
// between a holder's entries, whoever's write set them off.
//
// How much the entries hold is bounded with the rest of the object (MaxFreeObjectBytes).
func ownershipChanges(old, updated *unstructured.Unstructured, free func(Path) bool, controller bool) (changes []ownershipChange, err error) {
	before, err := entries(old)
	if err != nil {
		return nil, fmt.Errorf("reading the stored object's managedFields: %w", err)
	}
	after, err := entries(updated)
	if err != nil {
		return nil, fmt.Errorf("reading the written object's managedFields: %w", err)
	}
	after = undoMerges(before, after)
	var in *finder
	if updated != nil {
		in = newFinder(updated.Object)
	}
	outside := func(e entry, s *fieldpath.Set, why string) {
		s.Iterate(func(p fieldpath.Path) {
			if ap := asPath(p); len(ap) > 0 && !free(ap) {
				changes = append(changes, ownershipChange{entry: e, path: ap, why: why})
			}
		})
	}
	for id, a := range after {
		b, existed := before[id]
		if !existed {
			b = entry{fields: fieldpath.NewSet()}
			if a.holders() {
				changes = append(changes, ownershipChange{entry: a, why: "adds an entry for a fenced writer"})
			}
		}
		if existed && a.epochManager() && a.time != b.time {
			changes = append(changes, ownershipChange{entry: a, why: fmt.Sprintf("changes the time the apiserver recorded from %s to %s", orNone(b.time), orNone(a.time))})
		}
		gained, lost := a.fields.Difference(b.fields), b.fields.Difference(a.fields)
		if a.holders() && !gained.Empty() {
			changes = append(changes, ownershipChange{entry: a, path: firstPath(gained), why: "gives a fenced writer's entry ownership of"})
		}
		outside(a, gained, "gives ownership of")
		gained.Iterate(func(p fieldpath.Path) {
			if in != nil && !in.has(p) {
				changes = append(changes, ownershipChange{entry: a, path: asPath(p), why: "gives ownership of a field the object does not have, under"})
			}
			if f := deletionFinalizer(p); f != "" {
				changes = append(changes, ownershipChange{entry: a, path: Path{"metadata", "finalizers", f},
					why: "gives ownership of a finalizer that decides what a delete does with the dependents, which the holder's next apply could then not remove, under"})
			}
		})
		outside(a, lost, "takes ownership of")
		if a.holders() && !lost.Empty() && !controller {
			changes = append(changes, ownershipChange{entry: a, path: firstPath(lost), why: "takes from a fenced writer's entry ownership of"})
		}
	}
	for id, b := range before {
		if _, kept := after[id]; !kept {
			outside(b, b.fields, "removes the entry that owns")
			if b.holders() && !b.fields.Empty() && !controller {
				changes = append(changes, ownershipChange{entry: b, path: firstPath(b.fields), why: "removes the fenced writer's entry that owns"})
			}
		}
	}
	// The most specific change first, in a fixed order: the refusal names the same field every time.
	slices.SortStableFunc(changes, func(x, y ownershipChange) int {
		if c := cmp.Compare(len(y.path), len(x.path)); c != 0 {
			return c
		}
		if c := cmp.Compare(x.path.String(), y.path.String()); c != 0 {
			return c
		}
		return cmp.Compare(x.entry.id(), y.entry.id())
	})
	return changes, nil
}

// orNone quotes s, "none" if it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return strconv.Quote(s)
}

// deletionFinalizer returns the deletion finalizer (orphan, foregroundDeletion) that managedFields path p
// names, "" if it names none.
func deletionFinalizer(p fieldpath.Path) string {
	if len(p) != 3 || p[0].FieldName == nil || *p[0].FieldName != "metadata" || p[1].FieldName == nil ||
		*p[1].FieldName != "finalizers" || p[2].Value == nil {
		return ""
	}
	if v := *p[2].Value; v.IsString() && (v.AsString() == orphanFinalizer || v.AsString() == foregroundFinalizer) {
		return v.AsString()
	}
	return ""
}

// has reports whether obj holds the field at p: a map's key, a list's element by its key fields (k:),
// its value (v:) or its index (i:).
func has(obj map[string]any, p fieldpath.Path) bool {
	return newFinder(obj).has(p)
}

// finder finds in an object the fields that managedFields paths name. It indexes each long list it
// searches by the key fields or the values its elements are named by, once: finding each of the n elements
// of a list (a status of thousands of conditions) costs n lookups, not n² comparisons.
type finder struct {
	obj   map[string]any
	lists map[listIndexKey]map[string][]int
}

// listIndexKey is one list of the object (its first element's address and its length) indexed by one
// way of naming its elements ("v" for values, else the key fields' names).
type listIndexKey struct {
	first *any
	n     int
	by    string
}

// shortList is the length up to which a list is searched element by element.
const shortList = 16

func newFinder(obj map[string]any) *finder {
	return &finder{obj: obj, lists: map[listIndexKey]map[string][]int{}}
}

// has reports whether the object holds the field at p (see has).
func (f *finder) has(p fieldpath.Path) bool { return walk(f.obj, p, f.find) }

// walk reports whether obj holds the field at p, finding a list's element by its key fields or value with
// find (the index of the first element named, -1 for none).
func walk(obj map[string]any, p fieldpath.Path, find func(l []any, pe fieldpath.PathElement) int) bool {
	var cur any = obj
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return false
			}
			if cur, ok = m[*pe.FieldName]; !ok {
				return false
			}
		case pe.Index != nil:
			l, ok := cur.([]any)
			if !ok || *pe.Index < 0 || *pe.Index >= len(l) {
				return false
			}
			cur = l[*pe.Index]
		default:
			l, _ := cur.([]any)
			i := find(l, pe)
			if i < 0 {
				return false
			}
			cur = l[i]
		}
	}
	return true
}

// find returns the index of the first element of l that pe names by its key fields or its value, -1 if
// none does.
func (f *finder) find(l []any, pe fieldpath.PathElement) int {
	// An empty key (k:{}) names every map, as matches reads it: rare enough to search for.
	if len(l) <= shortList || (pe.Value == nil && (pe.Key == nil || len(*pe.Key) == 0)) {
		return slices.IndexFunc(l, func(e any) bool { return matches(e, pe) })
	}
	by, names := "v", []string(nil)
	if pe.Value == nil {
		quoted := make([]string, len(*pe.Key))
		for i, fl := range *pe.Key {
			names = append(names, fl.Name)
			quoted[i] = strconv.Quote(fl.Name) // no two lists of names render alike
		}
		by = "k" + strings.Join(quoted, ",")
	}
	k := listIndexKey{first: &l[0], n: len(l), by: by}
	index, ok := f.lists[k]
	if !ok {
		index = map[string][]int{}
		for i, e := range l {
			if b, ok := elementBucket(e, names); ok {
				index[b] = append(index[b], i)
			}
		}
		f.lists[k] = index
	}
	var want string
	if pe.Value != nil {
		want = bucket((*pe.Value).Unstructured())
	} else {
		parts := make([]string, len(*pe.Key))
		for i, fl := range *pe.Key {
			parts[i] = bucket(fl.Value.Unstructured())
		}
		want = strings.Join(parts, "\x00")
	}
	for _, i := range index[want] {
		if matches(l[i], pe) {
			return i
		}
	}
	return -1
}

// elementBucket is the bucket of list element e by the values of its key fields names (by its own value
// when names is nil); false if e lacks one of them, and so matches no key.
func elementBucket(e any, names []string) (string, bool) {
	if names == nil {
		return bucket(e), true
	}
	m, ok := e.(map[string]any)
	if !ok {
		return "", false
	}
	parts := make([]string, len(names))
	for i, name := range names {
		v, ok := m[name]
		if !ok {
			return "", false
		}
		parts[i] = bucket(v)
	}
	return strings.Join(parts, "\x00"), true
}

// bucket is a coarse rendering of a value for the index: two values that value.Equals holds equal (an
// integer decoded as float64 or int64 included) have the same bucket; values of one bucket may differ,
// and matches tells them apart.
func bucket(v any) string {
	num := func(f float64) string {
		if f == 0 {
			return "#0" // -0 and 0
		}
		return "#" + strconv.FormatFloat(f, 'g', -1, 64)
	}
	switch v := v.(type) {
	case nil:
		return "n"
	case string:
		return "s" + v
	case bool:
		return "b" + strconv.FormatBool(v)
	case int64:
		return num(float64(v))
	case int:
		return num(float64(v))
	case int32:
		return num(float64(v))
	case float64:
		return num(v)
	case float32:
		return num(float64(v))
	}
	return "*"
}

// matches reports whether list element e is the one pe names by its key fields or its value.
func matches(e any, pe fieldpath.PathElement) bool {
	if pe.Value != nil {
		return value.Equals(value.NewValueInterface(e), *pe.Value)
	}
	m, ok := e.(map[string]any)
	if !ok || pe.Key == nil {
		return false
	}
	for _, f := range *pe.Key {
		v, ok := m[f.Name]
		if !ok || !value.Equals(value.NewValueInterface(v), f.Value) {
			return false
		}
	}
	return true
}

func firstPath(s *fieldpath.Set) Path {
	var first Path
	s.Iterate(func(p fieldpath.Path) {
		if first == nil {
			first = asPath(p)
		}
	})
	return first
}
