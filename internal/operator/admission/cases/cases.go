// Package cases is fencekit's threat model as data: who writes what, with which token, to which fenced
// object, under which Lease, and whether it is admitted. internal/operator/admission's unit tests run every row
// through the admission rule; test/admission's TestCases runs every row on the real apiserver, through the
// webhooks, the CRD's CEL rule and the Lease policy, so that the Go rule and the CEL rules cannot drift
// apart. A change to the rule starts here.
package cases

import (
	"encoding/json"
	"fmt"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// The epochs of every row: the Lease was acquired at Stale by the stale holder (the same user as the
// holder: another replica of its Deployment), then at Current by the holder, who wrote the objects.
const (
	Stale   int64 = 2
	Current int64 = 3
	Future  int64 = 4
	Holder        = "holder" // the Lease's holder identity
)

// Target is what a row writes.
type Target string

const (
	FencedResource Target = "FencedResource" // FencedResource "r", bound to Lease "l"
	Declaration    Target = "Declaration"    // FencedResource "d", bound to Lease "l", without data, raised by fence-on-acquire
	ConfigMap      Target = "ConfigMap"      // ConfigMap "cm", labelled app=fenced, covered by a FencingPolicy
	Deployment     Target = "Deployment"     // Deployment "dep", covered by the same FencingPolicy
	Lease          Target = "Lease"          // Lease "l" itself, under fencekit's Lease policy
)

// FencedResource reports whether t is a FencedResource, with data or a declaration.
func (t Target) FencedResource() bool { return t == FencedResource || t == Declaration }

// Actor is who writes. The holder and the stale holder are one user (the acquirer, HolderUser).
type Actor string

const (
	HolderUser       Actor = "holder-user"   // the acquiring user: the holder, or a stale replica of it
	OtherElector     Actor = "intruder-user" // another user bound to the fencekit-elector role
	Editor           Actor = "editor"        // a user with RBAC on the objects only (a namespace admin, GitOps)
	BreakGlass       Actor = "oncall"        // a member of fencekit:breakglass
	GarbageCollector Actor = admission.GarbageCollectorUser
	DeploymentCtrl   Actor = admission.DeploymentControllerUser
	ReplicaSetCtrl   Actor = "system:serviceaccount:kube-system:replicaset-controller"
	// Operator is fencekit's operator: on the apiserver, the user the test's operator runs as.
	Operator Actor = "fencekit-operator"
)

// Groups are the groups an actor authenticates with.
func (a Actor) Groups() []string {
	if a == BreakGlass {
		return []string{admission.BreakGlassGroup}
	}
	return nil
}

// Token is the epoch a write presents as its field manager.
type Token string

const (
	NoToken      Token = "none"
	CurrentToken Token = "current"
	StaleToken   Token = "stale"
	FutureToken  Token = "future"
)

// Epoch is the epoch the token presents (0 for none).
func (t Token) Epoch() int64 {
	switch t {
	case CurrentToken:
		return Current
	case StaleToken:
		return Stale
	case FutureToken:
		return Future
	case NoToken:
		return 0
	}
	return 0
}

// LeaseState is the Lease's state when the write is made.
type LeaseState string

const (
	Live     LeaseState = "live"     // held by the holder at Current
	Released LeaseState = "released" // released by the holder at Current
)

// LeasePolicy is the verdict of a row the Lease policy refuses (a ValidatingAdmissionPolicy refusal
// carries no fencing reason).
const LeasePolicy protocol.Reason = "LeasePolicy"

// Case is one row.
type Case struct {
	Name   string
	Target Target
	Actor  Actor
	Token  Token
	Lease  LeaseState
	// Setup is a JSON merge patch the holder makes to the target, with the current token and stamped like
	// the write, before the write (nil for none): the state the row starts from.
	Setup func(stored map[string]any) map[string]any
	// Op and Subresource are the write's; Patch is its JSON merge patch of the stored object (the write is
	// an update, a patch and a server-side apply alike for admission), computed from the stored object,
	// nil for a DELETE. A write that presents a token is stamped as pkg/fencing's clients stamp it (Stamp).
	Op          admission.Operation
	Subresource string
	Patch       func(stored map[string]any) map[string]any
	// Precondition makes a DELETE name the stored resourceVersion as its precondition, as pkg/fencing's
	// Writer.Delete and NewClient do after their marker write.
	Precondition bool
	// Raise stamps the write as fence-on-acquire's raise of a declaration: spec.raisedEpoch, not spec.epoch.
	Raise bool
	// Raw sends the patch with the token but unstamped, as a hand-made write (kubectl with the token as its
	// field manager) would.
	Raw bool
	// Want is the refusal's reason, "" when the write is admitted.
	Want protocol.Reason
	// Why says what the row shows.
	Why string
}

// Stamp adds to patch what pkg/fencing's Writer (a FencedResource: spec.epoch, the writer annotation) or
// NewClient (an object: the epoch record) writes with a token presenting epoch, and the removal of a
// deletion marker they make in every write. A status write is not stamped.
func (c Case) Stamp(patch map[string]any, epoch int64) map[string]any {
	if epoch == 0 || c.Raw || c.Target == Lease || c.Subresource != "" {
		return patch
	}
	out := map[string]any{}
	for k, v := range patch {
		out[k] = v
	}
	md, _ := out["metadata"].(map[string]any)
	m := map[string]any{}
	for k, v := range md {
		m[k] = v
	}
	ann, _ := m["annotations"].(map[string]any)
	a := map[string]any{}
	for k, v := range ann {
		a[k] = v
	}
	if _, set := a[markerKey]; !set {
		a[markerKey] = nil
	}
	if c.Target.FencedResource() {
		a[writerKey] = Holder
		spec, _ := out["spec"].(map[string]any)
		s := map[string]any{}
		for k, v := range spec {
			s[k] = v
		}
		if c.Raise {
			a[fencingv1alpha1.HoldAtEpochAnnotation] = nil
			s["raisedEpoch"] = epoch
		} else {
			s["epoch"] = epoch
		}
		out["spec"] = s
	} else {
		a[recordKey] = itoa(epoch)
	}
	m["annotations"] = a
	out["metadata"] = m
	return out
}

// MergePatch is stored with the JSON merge patch applied, as the apiserver applies one: the object a row's
// write leaves (numbers decoded as the apiserver's unstructured objects hold them, int64 or float64).
func MergePatch(stored map[string]any, patch []byte) (map[string]any, error) {
	doc, err := json.Marshal(stored)
	if err != nil {
		return nil, fmt.Errorf("encoding the stored object: %w", err)
	}
	out, err := jsonpatch.MergePatch(doc, patch)
	if err != nil {
		return nil, fmt.Errorf("applying the merge patch %s: %w", patch, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(out); err != nil {
		return nil, fmt.Errorf("decoding the patched object: %w", err)
	}
	return u.Object, nil
}
