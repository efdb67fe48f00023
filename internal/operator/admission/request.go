package admission

import (
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Class is what kind of fenced object a write is to.
type Class int

const (
	// FencedResource is a fencing.fencekit.io FencedResource: its data is spec.data, its epoch spec.epoch
	// (the CRD's CEL rule keeps the maximum), its Lease spec.leaseName.
	FencedResource Class = iota
	// Object is an object a FencingPolicy covers: all of it is the holder's, its epoch record the
	// annotation fencing.fencekit.io/epoch.
	Object
	// FencedLease is a Lease labelled fencing.fencekit.io/fenced=true. Its epoch, holder, acquirer,
	// declaration, owners and the bounds on its labels, annotations and finalizers are the Lease policy's
	// (config/policy/lease_policy.yaml, CEL in the apiserver); the rule bounds its size (decideLease).
	FencedLease
)

// Operation is the admission operation. A patch and a server-side apply arrive as Update.
type Operation string

const (
	Create Operation = "CREATE"
	Update Operation = "UPDATE"
	Delete Operation = "DELETE"
)

// BreakGlassGroup is the group whose members may write a fenced object without being the Lease's acquirer
// (they present the Lease's current token like anyone) and may delete one whose Lease has a live holder.
// Members of system:masters have the same rights. Grant it only for recovery.
const BreakGlassGroup = "fencekit:breakglass"

// The cluster's own controllers the rule names.
const (
	// GarbageCollectorUser deletes objects whose owners are gone, and removes owner references (orphaning).
	GarbageCollectorUser = "system:serviceaccount:kube-system:generic-garbage-collector"
	// NamespaceControllerUser empties a namespace that is being deleted.
	NamespaceControllerUser = "system:serviceaccount:kube-system:namespace-controller"
	// DeploymentControllerUser writes a Deployment's status and its revision annotation (through
	// deployments/status since Kubernetes 1.37).
	DeploymentControllerUser = "system:serviceaccount:kube-system:deployment-controller"
	// ControllerManagerUser is kube-controller-manager when it runs every controller under one credential
	// (--use-service-account-credentials=false).
	ControllerManagerUser = "system:kube-controller-manager"
	// SchedulerUser binds Pods to nodes and deletes the Pods it preempts.
	SchedulerUser = "system:kube-scheduler"
	// APIServerUser is the apiserver's own loopback credential: its eviction handler writes the status of
	// the PodDisruptionBudgets an eviction is counted against, and quota admission a ResourceQuota's
	// usage, with it.
	APIServerUser = "system:apiserver"
)

// More of kube-controller-manager's controllers, each writing as its own ServiceAccount with
// --use-service-account-credentials (kubeadm's default, and every managed cluster's that documents it).
const (
	TTLControllerUser     = "system:serviceaccount:kube-system:ttl-after-finished-controller"
	VolumeBinderUser      = "system:serviceaccount:kube-system:persistent-volume-binder"
	TokenControllerUser   = "system:serviceaccount:kube-system:tokens-controller"
	RootCAPublisherUser   = "system:serviceaccount:kube-system:root-ca-cert-publisher"
	ReplicaSetCtrlUser    = "system:serviceaccount:kube-system:replicaset-controller"
	EndpointSliceCtrlUser = "system:serviceaccount:kube-system:endpointslice-controller"
)

// User is the authenticated user of a request, as the apiserver reports it to admission.
type User struct {
	Name   string
	Groups []string
	// Operator: the user is fencekit's operator, the user its own client writes as (which the webhook that
	// decodes the request learns from the apiserver at start). Its status writes on FencedResources have
	// an allowance above the bounds (MaxOperatorPartBytes).
	Operator bool
}

// is reports whether u is the controller whose ServiceAccount is sa, or kube-controller-manager running
// every controller under its own credential (--use-service-account-credentials=false), which the
// apiserver cannot tell apart: either is the cluster's own controller.
func (u User) is(sa string) bool { return u.Name == sa || u.Name == ControllerManagerUser }

func (u User) breakGlass() bool {
	return slices.Contains(u.Groups, BreakGlassGroup) || slices.Contains(u.Groups, "system:masters")
}

// kubeControllerManagerAccounts are the ServiceAccounts kube-controller-manager's controllers write as
// with --use-service-account-credentials (Kubernetes 1.37's bootstrap RBAC policy binds one role to each,
// some only behind a feature gate), by name in kube-system.
var kubeControllerManagerAccounts = sets.New(
	"attachdetach-controller", "certificate-controller", "clusterrole-aggregation-controller", "cronjob-controller",
	"daemon-set-controller", "deployment-controller", "device-taint-eviction-controller", "disruption-controller",
	"endpoint-controller", "endpointslice-controller", "endpointslicemirroring-controller", "ephemeral-volume-controller",
	"expand-controller", "generic-garbage-collector", "horizontal-pod-autoscaler", "job-controller",
	"kube-apiserver-serving-clustertrustbundle-publisher", "legacy-service-account-token-cleaner", "namespace-controller",
	"node-controller", "persistent-volume-binder", "pod-garbage-collector", "podcertificaterequestcleaner",
	"pv-protection-controller", "pvc-protection-controller", "replicaset-controller", "replication-controller",
	"resource-claim-controller", "resourcequota-controller", "root-ca-cert-publisher", "route-controller",
	"selinux-warning-controller", "service-account-controller", "service-cidrs-controller", "service-controller",
	"statefulset-controller", "storage-version-migrator-controller", "tokens-controller", "ttl-after-finished-controller",
	"ttl-controller", "validatingadmissionpolicy-status-controller", "volumeattributesclass-protection-controller",
)

// workloadPodDeleters are the controllers among them that delete the Pods their own objects control
// (scaling down, replacing, cleaning up), by the group and kind of those objects ("group/Kind"): a Pod's
// controller owner reference is fenced, so a holder (or whoever created the Pod before a policy covered
// it) set it.
var workloadPodDeleters = map[string]sets.Set[string]{
	"daemon-set-controller":  sets.New("apps/DaemonSet"),
	"job-controller":         sets.New("batch/Job"),
	"replicaset-controller":  sets.New("apps/ReplicaSet"),
	"replication-controller": sets.New("/ReplicationController"),
	"statefulset-controller": sets.New("apps/StatefulSet"),
}

// nodePodDeleters are the controllers among them that delete Pods bound to a node: evicting them from a
// tainted or lost node, collecting terminated and orphaned ones, deleting a scheduled Pod whose claims
// cannot be allocated. A Pod gets its node only from a Binding (the scheduler's) or at its creation.
var nodePodDeleters = sets.New("device-taint-eviction-controller", "node-controller", "pod-garbage-collector", "resource-claim-controller")

// kubeSystemAccount returns the name of u's ServiceAccount in kube-system, "" for any other user.
func (u User) kubeSystemAccount() string {
	name, ok := strings.CutPrefix(u.Name, "system:serviceaccount:kube-system:")
	if !ok {
		return ""
	}
	return name
}

// clusterController reports whether u is one of the cluster's own controllers: one of
// kube-controller-manager's controllers (its ServiceAccounts, or its own user when it runs them under one
// credential), kube-scheduler, a kubelet (group system:nodes, held to its own node's Pods by
// NodeRestriction), or the apiserver itself (its loopback user: the eviction handler's count against a
// PodDisruptionBudget, quota admission's usage on a ResourceQuota, both through status). Another ServiceAccount of kube-system (an add-on's) is not one: it follows the rules
// of any user.
func (u User) clusterController() bool {
	return u.kubeControllerManager() || u.Name == SchedulerUser || u.Name == APIServerUser || slices.Contains(u.Groups, "system:nodes")
}

// kubeControllerManager reports whether u is one of kube-controller-manager's controllers (their
// ServiceAccounts, or its own user when it runs them under one credential).
func (u User) kubeControllerManager() bool {
	return kubeControllerManagerAccounts.Has(u.kubeSystemAccount()) || u.Name == ControllerManagerUser
}

// deletesPod reports whether u is a cluster controller whose work includes deleting pod (the stored Pod):
// a workload controller (workloadPodDeleters) a Pod that an object of its group and kind controls; a node
// lifecycle controller (nodePodDeleters) or kube-scheduler (preemption) a Pod bound to a node, a kubelet
// one bound to its own node; kube-controller-manager under one credential either. A Pod no controller
// owns and no node runs is its holder's alone to delete.
func (u User) deletesPod(pod *unstructured.Unstructured) bool {
	if pod == nil {
		return false
	}
	kcm := u.Name == ControllerManagerUser
	if kinds, ok := workloadPodDeleters[u.kubeSystemAccount()]; ok || kcm {
		for _, ref := range pod.GetOwnerReferences() {
			gv, err := schema.ParseGroupVersion(ref.APIVersion)
			if err != nil || ref.Controller == nil || !*ref.Controller {
				continue
			}
			if owner := gv.Group + "/" + ref.Kind; kcm && workloadKind(owner) || kinds.Has(owner) {
				return true
			}
		}
	}
	node, _, _ := unstructured.NestedString(pod.Object, "spec", "nodeName")
	if node == "" {
		return false
	}
	return kcm || nodePodDeleters.Has(u.kubeSystemAccount()) || u.Name == SchedulerUser || u.isNode(node)
}

// isNode reports whether u is the kubelet of node (group system:nodes, user system:node:<node>): the
// apiserver's NodeRestriction holds a kubelet to its own node's Pods where it runs, and the rule does not
// count on it.
func (u User) isNode(node string) bool {
	return slices.Contains(u.Groups, "system:nodes") && u.Name == "system:node:"+node
}

// bindsPods reports whether u may bind a Pod to node: kube-scheduler, or a kubelet to its own node. A
// binding gives a Pod the node that node lifecycle controllers delete it for (deletesPod), so no other
// controller's credential may make one.
func (u User) bindsPods(node string) bool {
	return u.Name == SchedulerUser || u.isNode(node)
}

// workloadKind reports whether owner ("group/Kind") is the kind of an object whose controller deletes the
// Pods it controls.
func workloadKind(owner string) bool {
	for _, kinds := range workloadPodDeleters {
		if kinds.Has(owner) {
			return true
		}
	}
	return false
}

// Request is one admission request for a fenced object, decoded.
type Request struct {
	Class       Class
	Operation   Operation
	Subresource string // "" for the object itself; "status", "scale", "eviction", "binding", ...
	User        User
	// FieldManager is the request's fieldManager (CreateOptions, UpdateOptions, PatchOptions): a fenced
	// write presents its token there, fencing.fencekit.io/epoch=N. It is never read from the stored
	// object, so a write cannot inherit it. Empty for a DELETE.
	FieldManager string
	// Kind, Namespace and Name name the object in refusals (Name from the stored object when the request
	// has none: a deletecollection).
	Kind, Namespace, Name string
	// Old is the stored object (nil on create), New the object the write results in (nil on delete). For
	// a subresource whose object is of another kind (Scale, Eviction, Binding), they are that object.
	Old, New *unstructured.Unstructured
	// LeaseName is the bound Lease; Policy the covering FencingPolicy ("ns/name", objects only).
	LeaseName, Policy string
	// CoveredBefore and CoveredAfter say whether a FencingPolicy of the namespace covers the object with
	// its labels before and after the write (objects only; a create is not covered before, a delete not
	// after).
	CoveredBefore, CoveredAfter bool
	// CoverageRecorded and CoverageEpoch are the covering FencingPolicy's status.coverageEpoch, recorded
	// when its status.coverageGeneration is its generation (objects only): the Lease's copy may decide the
	// object's writes only at an epoch above CoverageEpoch, whose fence-on-acquire listed what the policy
	// declares now. Not recorded (the zero value), the copy decides nothing.
	CoverageRecorded bool
	CoverageEpoch    int64
	// OldBytes and NewBytes are the sizes of Old and New as the apiserver sent them (JSON); 0: Decide
	// encodes the object again to measure it.
	OldBytes, NewBytes int
	// DeletePrecondition is the resourceVersion a DELETE names as its precondition (DeleteOptions), "" for
	// none.
	DeletePrecondition string
	// Delete holds the DeleteOptions that decide what a DELETE does to the object's dependents and how
	// soon it goes.
	DeleteOptions DeleteOptions
	// NamespaceTerminating is whether the namespace is being deleted; read only where the rule asks
	// (ReadsNamespace).
	NamespaceTerminating bool
	// DryRun is whether the request is a dry run: the apiserver commits nothing of it.
	DryRun bool
	// Racing is, for an update that presents no token, the epoch a write presenting a token is being
	// decided at (or was admitted at a moment ago) on the very stored object this one read (the same
	// UID and resourceVersion), 0 if none: the webhook's record of the writes it decides.
	Racing int64

	// facts are what Complete read off the fields above.
	facts facts
}

// facts are what Complete reads off a request's strings with the wire contract (pkg/protocol) and the
// fenced client's reading of managedFields (pkg/fencing), once, so that the rule compares numbers and flags.
type facts struct {
	completed bool
	// token is the epoch the field manager presents; tokenOK is false where it presents none, or not a
	// valid token.
	token   int64
	tokenOK bool
	// record is the stored object's epoch record (its annotation fencing.fencekit.io/epoch); recordOK is
	// false where it has none, or not a valid epoch.
	record   int64
	recordOK bool
	// marks are the stored object's deletion marker and hold, each where it holds a valid epoch, in that
	// order.
	marks []mark
	// oldWritten and newWritten: a holder wrote content to the stored and to the resulting object
	// (fencing.HolderWrote). mergeCountsWritten: the resulting object, which no holder wrote, would count
	// as written once the apiserver merged its Update entries (fencing.MergeWouldCountWritten). Objects
	// only.
	oldWritten, newWritten, mergeCountsWritten bool
}

// mark is a deletion marker or a hold the stored object carries: its annotation, its epoch, and when the
// holder of that epoch armed it (armedAt; zero if no entry of that token owns it).
type mark struct {
	key   string
	epoch int64
	armed time.Time
}

// Complete reads what the rule compares off r's field manager and objects: the presented token, the
// stored object's epoch record, deletion marker and hold, and whether a holder wrote the stored and the
// resulting object. Call it once Class, FieldManager, Old and New are set, before Decide; Decide refuses
// a request that was not completed.
func (r *Request) Complete() {
	f := facts{completed: true}
	f.token, f.tokenOK = protocol.EpochFromFieldManager(r.FieldManager)
	if r.Old != nil {
		if raw, ok := r.Old.GetAnnotations()[fencingv1alpha1.ObjectEpochAnnotation]; ok {
			e, err := protocol.ParseEpoch(raw)
			f.record, f.recordOK = e, err == nil
		}
		for _, key := range []string{fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation} {
			raw, ok := r.Old.GetAnnotations()[key]
			if !ok {
				continue
			}
			if e, err := protocol.ParseEpoch(raw); err == nil {
				f.marks = append(f.marks, mark{key: key, epoch: e, armed: armedAt(r.Old, key, e)})
			}
		}
	}
	if r.Class == Object {
		f.oldWritten = r.Old != nil && fencing.HolderWrote(r.Old)
		f.newWritten = r.New != nil && fencing.HolderWrote(r.New)
		f.mergeCountsWritten = r.New != nil && !f.newWritten && fencing.MergeWouldCountWritten(r.New)
	}
	r.facts = f
}

// armedAt is when the holder of epoch armed the annotation key obj carries: the latest time the apiserver
// recorded on a managedFields entry of that epoch's token that owns key (zero if none). An entry of the
// token that does not own key says nothing of it: a write without the token may send another entry's time
// rewritten (the apiserver keeps what a write sends), but not what an entry of a token owns
// (ownershipChanges), and the write that arms key sets the time of the entry that owns it.
func armedAt(obj *unstructured.Unstructured, key string, epoch int64) time.Time {
	manager := protocol.FieldManagerFor(epoch)
	var at time.Time
	for _, e := range managedEntries(obj) {
		if e["manager"] != manager {
			continue
		}
		fields, _ := e["fieldsV1"].(map[string]any)
		meta, _ := fields["f:metadata"].(map[string]any)
		annotations, _ := meta["f:annotations"].(map[string]any)
		if _, owns := annotations["f:"+key]; !owns {
			continue
		}
		raw, _ := e["time"].(string)
		if t, err := time.Parse(time.RFC3339, raw); err == nil && t.After(at) {
			at = t
		}
	}
	return at
}

// Token returns the epoch r presents, and whether it presents a valid token (Complete reads it).
func (r *Request) Token() (epoch int64, ok bool) { return r.facts.token, r.facts.tokenOK }

// DeleteOptions are the options of a DELETE that decide what it does, as the apiserver reads them
// (k8s.io/apiserver's registry Store.Delete); nil where the request leaves them out.
type DeleteOptions struct {
	// OrphanDependents and PropagationPolicy ("Orphan", "Background", "Foreground") choose what the garbage
	// collector does with the dependents.
	OrphanDependents  *bool
	PropagationPolicy *string
	// GracePeriodSeconds shortens a graceful deletion (a Pod's).
	GracePeriodSeconds *int64
	// DefaultOrphans is the resource's own default when neither the options nor the object's finalizers
	// say: orphan the dependents. The apiserver keeps it for the first versions of two resources
	// (DefaultOrphans); every other resource deletes them.
	DefaultOrphans bool
}

// DefaultOrphans reports whether a DELETE of kind sent at group/version orphans the dependents when
// neither its options nor the object's finalizers say (the resource's DefaultGarbageCollectionPolicy in
// kube-apiserver): core/v1 ReplicationControllers and batch/v1 Jobs, kept for backward compatibility.
func DefaultOrphans(group, version, kind string) bool {
	return group == "" && version == "v1" && kind == "ReplicationController" ||
		group == "batch" && version == "v1" && kind == "Job"
}

// key is "namespace/name", as refusals name the object.
func (r *Request) key() string { return r.Namespace + "/" + r.Name }

// what names the object in messages: "FencedResource ns/orders", "ConfigMap ns/app".
func (r *Request) what() string {
	if r.Class == FencedResource {
		return "FencedResource " + r.key()
	}
	return r.Kind + " " + r.key()
}

// presents reports whether the request presents a fencing token (or something that starts like one).
func (r *Request) presents() bool {
	return strings.HasPrefix(r.FieldManager, protocol.FieldManagerPrefix)
}

// PresentsToken reports whether r presents a fencing token (or something that starts like one) in its
// field manager.
func PresentsToken(r *Request) bool { return r.presents() }

// foreign reports whether the request's objects are of another kind than the fenced object (a Scale, an
// Eviction, a Binding): they carry none of its metadata.
func (r *Request) foreign() bool { return r.Subresource != "" && r.Subresource != "status" }

// ReadsNamespace reports whether deciding r needs to know if its namespace is terminating: the namespace
// controller's deletes (admitted only then), and the updates that present a token (refused then when they
// change content: the namespace controller deletes the object next).
func ReadsNamespace(r *Request) bool {
	if r.Class == FencedLease {
		return false
	}
	return r.Operation == Delete && r.User.is(NamespaceControllerUser) || r.Operation == Update && r.presents()
}

// Source is where a Lease view was read.
type Source int

const (
	// Quorum is a read straight from etcd: it shows every acquisition that completed before it.
	Quorum Source = iota
	// Copy is the webhook's watch-fed copy: it lags arbitrarily and never goes back. It may only admit,
	// and only what fence-on-acquire makes safe (see copyMayAdmit).
	Copy
)

func (s Source) String() string {
	if s == Copy {
		return "copy"
	}
	return "quorum"
}

// Lease is what the rule needs of a Lease in the fencekit format, parsed once per request.
type Lease struct {
	Name   string
	Source Source
	// Missing says that the Lease does not exist (as seen from Source).
	Missing bool
	// Fenced is the label fencing.fencekit.io/fenced=true: only then does the Lease policy guard its epoch
	// and acquirer.
	Fenced bool
	// Epoch is the current epoch; EpochErr says why it could not be read (missing or malformed).
	Epoch    int64
	EpochErr string
	Holder   string
	Acquirer string
	// RenewTime and Duration are the holder's last renewal and lease duration; Duration <= 0 when missing.
	RenewTime time.Time
	Duration  time.Duration
	// ObservedRenewal is when the deciding webhook, on its own clock, saw this renewal (RenewTime as it
	// stands) replace an earlier one; zero if it has not. RenewTime is the holder's clock, which may be
	// behind the webhook's: a renewal the webhook watched happen keeps the Lease live for Duration from
	// then, as a standby elector times the renewals it observes (docs/design/elector.md).
	ObservedRenewal time.Time
	// Fences is the fence-on-acquire declaration (annotation fencing.fencekit.io/fences); a malformed one
	// declares nothing.
	Fences protocol.Fences
}

// ParseLease reads l (nil if it does not exist: Missing) as read from src. It never fails: what it cannot
// read is reported in EpochErr (the epoch), a zero Duration (treated as expired) or an empty declaration.
func ParseLease(l *coordinationv1.Lease, src Source) *Lease {
	if l == nil {
		return &Lease{Source: src, Missing: true}
	}
	v := &Lease{Name: l.Name, Source: src, Fenced: l.Labels[protocol.FencedLabel] == "true",
		Acquirer: l.Annotations[protocol.AcquirerAnnotation]}
	raw, ok := l.Annotations[protocol.EpochAnnotation]
	switch epoch, err := protocol.ParseEpoch(raw); {
	case !ok:
		v.EpochErr = "it has no " + protocol.EpochAnnotation + " annotation (no fencekit elector has acquired it)"
	case err != nil:
		v.EpochErr = "its " + protocol.EpochAnnotation + " annotation " + strconv.Quote(raw) + " is not an epoch >= 1"
	case epoch > protocol.MaxEpoch:
		v.EpochErr = "its " + protocol.EpochAnnotation + " annotation " + strconv.Quote(raw) + " is above the highest epoch " +
			strconv.FormatInt(protocol.MaxEpoch, 10) + " (no fencekit elector issues it)"
	default:
		v.Epoch = epoch
	}
	if l.Spec.HolderIdentity != nil {
		v.Holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		v.RenewTime = l.Spec.RenewTime.Time
	}
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		v.Duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	if f, err := protocol.ParseFences(l.Annotations[protocol.FencesAnnotation]); err == nil {
		v.Fences = f
	}
	return v
}

// Live reports whether the Lease has a holder whose lease has not expired at now, at a valid epoch.
func (l *Lease) Live(now time.Time) bool {
	return l != nil && !l.Missing && l.EpochErr == "" && l.Holder != "" && l.Duration > 0 && !l.RenewTime.IsZero() &&
		!now.After(l.Expiry())
}

// Expiry is when the holder's lease ends: Duration after the later of its renewTime and the moment the
// webhook observed that renewal (ObservedRenewal). Either shows the holder renewed then; taking the later
// keeps a holder whose clock is behind the webhook's live (its writes admitted, others' deletes refused)
// for as long as its standbys, which time what they observe, let it lead.
func (l *Lease) Expiry() time.Time {
	from := l.RenewTime
	if l.ObservedRenewal.After(from) {
		from = l.ObservedRenewal
	}
	return from.Add(l.Duration)
}

// declares reports whether every acquisition of the Lease raises objects of class c before it hands out
// its token.
func (l *Lease) declares(c Class) bool {
	if c == FencedResource {
		return l.Fences.FencedResources
	}
	return l.Fences.Objects
}
