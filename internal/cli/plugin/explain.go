package plugin

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Extra is a write to judge besides the usual ones: presenting Epoch (0: none) as Requester (default: the
// Lease's acquirer).
type Extra struct {
	Epoch     int64
	Requester string
}

// Explanation is what `kubectl fencekit explain OBJECT` shows.
type Explanation struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Fenced is false when no FencingPolicy declares the object: its writes are not fenced.
	Fenced bool `json:"fenced"`
	// Policy is the FencingPolicy that declares the object ("" for a FencedResource).
	Policy string `json:"policy,omitempty"`
	// LeaseName is the Lease that fences the object; Lease is what was read of it (nil if it does not exist).
	LeaseName string       `json:"leaseName,omitempty"`
	Lease     *LeaseStatus `json:"lease,omitempty"`
	// Epoch is the epoch the object records: spec.epoch of a FencedResource, the annotation
	// fencing.fencekit.io/object-epoch of a declared object (0 if none).
	Epoch int64 `json:"epoch"`
	// State is the object's state relative to its Lease (see ResourceStatus.State).
	State string `json:"state,omitempty"`
	// Writes are the judged writes.
	Writes []Verdict `json:"writes"`
	// Note says what could not be judged (an object declared by two policies bound to different Leases).
	Note string `json:"note,omitempty"`
}

// Verdict is the decision fencekit would make now on one write of the object.
type Verdict struct {
	// Writer says who writes: "holder", "stale-replica", "no-token", "requested" (--epoch).
	Writer string `json:"writer"`
	// Description says it in words.
	Description  string `json:"description"`
	Epoch        int64  `json:"epoch,omitempty"`
	User         string `json:"user,omitempty"`
	FieldManager string `json:"fieldManager"`
	Admitted     bool   `json:"admitted"`
	// Mechanism (fencing.MechanismCRDRule or fencing.MechanismWebhook), Reason and Message say what
	// refuses the write and why (empty when it is admitted).
	Mechanism string `json:"mechanism,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
}

// Explain judges the writes of the object ref ("fr/NAME", "configmap/NAME", "deployments.apps/NAME") in
// namespace, as fencekit's admission would now.
func Explain(ctx context.Context, c client.Reader, mapper meta.RESTMapper, namespace, ref string, extra Extra, now time.Time) (*Explanation, error) {
	resource, name, ok := strings.Cut(ref, "/")
	if !ok || resource == "" || name == "" {
		return nil, fmt.Errorf("object %q: want RESOURCE/NAME, for example fr/orders or configmap/settings", ref)
	}
	_, gr := schema.ParseResourceArg(resource)
	gvr, err := mapper.ResourceFor(gr.WithVersion(""))
	if err != nil {
		return nil, fmt.Errorf("object %q: resolving resource %q: %w", ref, resource, err)
	}
	if gvr.GroupResource() == fencingv1alpha1.GroupVersion.WithResource("fencedresources").GroupResource() {
		return explainFencedResource(ctx, c, types.NamespacedName{Namespace: namespace, Name: name}, extra, now)
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return nil, fmt.Errorf("object %q: %w", ref, err)
	}
	return explainObject(ctx, c, gvr, gvk, types.NamespacedName{Namespace: namespace, Name: name}, extra, now)
}

// candidate is a write to judge: presenting epoch (0: no token) as user.
type candidate struct {
	writer, description string
	epoch               int64
	user                string
}

// candidates are the writes worth judging: the holder's, a stale replica's at the object's recorded epoch
// (when it is below the Lease's), one without a token, and extra.
func candidates(lease *LeaseStatus, recorded int64, extra Extra) []candidate {
	var out []candidate
	if lease != nil && lease.EpochError == "" {
		out = append(out, candidate{"holder", fmt.Sprintf("the Lease's holder %s, presenting the Lease's epoch", orNobody(lease.Holder)), lease.Epoch, lease.Acquirer})
		if recorded > 0 && recorded < lease.Epoch {
			out = append(out, candidate{"stale-replica", "a stale replica of the acquiring user, presenting the object's recorded epoch", recorded, lease.Acquirer})
		}
	}
	out = append(out, candidate{"no-token", "any write without a fencing token (kubectl edit or apply, a merge patch)", 0, "someone"})
	if extra.Epoch > 0 {
		user := extra.Requester
		if user == "" && lease != nil {
			user = lease.Acquirer
		}
		out = append(out, candidate{"requested", "the write asked for with --epoch and --requester", extra.Epoch, user})
	}
	return out
}

func orNobody(s string) string {
	if s == "" {
		return "nobody (released)"
	}
	return s
}

// fieldManager is the field manager the candidate's write presents.
func (cd candidate) fieldManager() string {
	if cd.epoch > 0 {
		return protocol.FieldManagerFor(cd.epoch)
	}
	return "kubectl-edit"
}

// decide runs the webhook's rule on the candidate's update of old to new, on a quorum read of lease.
func (cd candidate) decide(r admission.Request, lease *coordinationv1.Lease, now time.Time) *fencing.Error {
	r.Operation, r.User, r.FieldManager = admission.Update, admission.User{Name: cd.user}, cd.fieldManager()
	r.Complete()
	return admission.Decide(&r, admission.ParseLease(lease, admission.Quorum), now).Err
}

func verdict(cd candidate, mechanism string, ferr *fencing.Error) Verdict {
	v := Verdict{Writer: cd.writer, Description: cd.description, Epoch: cd.epoch, User: cd.user, FieldManager: cd.fieldManager(), Admitted: ferr == nil}
	if ferr != nil {
		v.Mechanism, v.Reason, v.Message = mechanism, string(ferr.Reason), ferr.Message
	}
	return v
}

// readLease reads namespace/name, nil if it does not exist.
func readLease(ctx context.Context, c client.Reader, namespace, name string) (*coordinationv1.Lease, error) {
	var l coordinationv1.Lease
	switch err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &l); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading lease %s/%s: %w", namespace, name, err)
	}
	return &l, nil
}

func explainFencedResource(ctx context.Context, c client.Reader, key types.NamespacedName, extra Extra, now time.Time) (*Explanation, error) {
	var fr fencingv1alpha1.FencedResource
	if err := c.Get(ctx, key, &fr); err != nil {
		return nil, fmt.Errorf("reading FencedResource %s: %w", key, err)
	}
	lease, err := readLease(ctx, c, fr.Namespace, fr.Spec.LeaseName)
	if err != nil {
		return nil, err
	}
	e := &Explanation{Kind: "FencedResource", Namespace: fr.Namespace, Name: fr.Name, Fenced: true, LeaseName: fr.Spec.LeaseName,
		Epoch: fr.Spec.FencedEpoch(), State: resourceStatus(&fr, lease).State, Writes: []Verdict{}}
	if lease != nil {
		s := leaseStatus(lease)
		e.Lease = &s
	}
	for _, cd := range candidates(e.Lease, fr.Spec.FencedEpoch(), extra) {
		// The write as pkg/fencing's Writer makes it: new data, spec.epoch and the writer annotation set to
		// the token's epoch and the Lease's holder.
		next := fr.DeepCopy()
		next.Spec.Data = &runtime.RawExtension{Raw: []byte(`{"kubectl-fencekit-explain":true}`)}
		if cd.epoch > 0 {
			next.Spec.Epoch = cd.epoch
			if next.Annotations == nil {
				next.Annotations = map[string]string{}
			}
			if e.Lease != nil {
				next.Annotations[fencingv1alpha1.WriterAnnotation] = e.Lease.Holder
			}
		}
		if next.Spec.Epoch < fr.Spec.Epoch {
			// The CRD's transition rule refuses it inside the apiserver, before any webhook.
			e.Writes = append(e.Writes, verdict(cd, fencing.MechanismCRDRule, &fencing.Error{Reason: protocol.ReasonStale, Epoch: next.Spec.Epoch,
				Message: fmt.Sprintf("stale epoch %d: this FencedResource has already admitted epoch %d", next.Spec.Epoch, fr.Spec.Epoch)}))
			continue
		}
		if next.Spec.Epoch != 0 && next.Spec.Epoch < fr.Spec.RaisedEpoch {
			// So does the rule that holds a raised declaration's data to its raisedEpoch.
			e.Writes = append(e.Writes, verdict(cd, fencing.MechanismCRDRule, &fencing.Error{Reason: protocol.ReasonStale, Epoch: next.Spec.Epoch,
				Message: fmt.Sprintf("stale epoch %d: fence-on-acquire raised this FencedResource to epoch %d before it held data", next.Spec.Epoch, fr.Spec.RaisedEpoch)}))
			continue
		}
		old, err := toUnstructured(&fr)
		if err != nil {
			return nil, err
		}
		written, err := toUnstructured(next)
		if err != nil {
			return nil, err
		}
		r := admission.Request{Class: admission.FencedResource, Kind: "FencedResource", Namespace: fr.Namespace, Name: fr.Name,
			LeaseName: fr.Spec.LeaseName, Old: old, New: written}
		e.Writes = append(e.Writes, verdict(cd, fencing.MechanismWebhook, cd.decide(r, lease, now)))
	}
	return e, nil
}

func explainObject(ctx context.Context, c client.Reader, gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, key types.NamespacedName,
	extra Extra, now time.Time) (*Explanation, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, key, obj); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", gvk.Kind, key, err)
	}
	e := &Explanation{Kind: gvk.Kind, Namespace: key.Namespace, Name: key.Name, Writes: []Verdict{}}
	var list fencingv1alpha1.FencingPolicyList
	if err := c.List(ctx, &list, client.InNamespace(key.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the FencingPolicies of namespace %s: %w", key.Namespace, err)
	}
	// The coverage the object webhook decides by, for a write that keeps the object's labels.
	coverage := admission.CoverageOf(list.Items, gvr.GroupResource(), "", key.Name, obj.GetLabels(), obj.GetLabels(), true, true)
	if len(coverage.Policies) == 0 {
		return e, nil
	}
	first := coverage.Policies[0]
	e.Fenced, e.Policy, e.LeaseName = true, first.Namespace+"/"+first.Name, first.Spec.LeaseName
	if p := coverage.Conflict; p != nil {
		e.Note = fmt.Sprintf("also declared by FencingPolicy %s bound to lease %s: the webhook refuses every write until one of the policies is deleted",
			p.Name, p.Spec.LeaseName)
	}
	lease, err := readLease(ctx, c, key.Namespace, e.LeaseName)
	if err != nil {
		return nil, err
	}
	if lease != nil {
		s := leaseStatus(lease)
		e.Lease = &s
	}
	if raw, ok := obj.GetAnnotations()[fencingv1alpha1.ObjectEpochAnnotation]; ok {
		e.Epoch, _ = strconv.ParseInt(raw, 10, 64)
	}
	e.State = objectState(e.Epoch, lease)
	for _, cd := range candidates(e.Lease, e.Epoch, extra) {
		// The write as pkg/fencing's NewClient makes it: a change, and the epoch record set to the token's epoch.
		next := obj.DeepCopy()
		annotations := next.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[probeAnnotation] = "true"
		if cd.epoch > 0 {
			annotations[fencingv1alpha1.ObjectEpochAnnotation] = strconv.FormatInt(cd.epoch, 10)
		}
		next.SetAnnotations(annotations)
		r := admission.Request{Class: admission.Object, Kind: gvk.Kind, Namespace: key.Namespace, Name: key.Name, Policy: e.Policy,
			LeaseName: e.LeaseName, Old: obj, New: next, CoveredBefore: coverage.Before, CoveredAfter: coverage.After}
		ferr := cd.decide(r, lease, now)
		if ferr != nil {
			// The probe stands for any change of the object: say so, not the probe's own key.
			ferr.Message = strings.ReplaceAll(ferr.Message, probeField, "its content")
			ferr.Field = strings.ReplaceAll(ferr.Field, probeField, "content")
		}
		if ferr == nil && e.Note != "" {
			ferr = &fencing.Error{Reason: protocol.ReasonNotHolder, Message: e.Note}
		}
		e.Writes = append(e.Writes, verdict(cd, fencing.MechanismWebhook, ferr))
	}
	return e, nil
}

// probeAnnotation is the change explain judges for an object (any kind, so no field of its own): an
// annotation, which a FencingPolicy fences as it fences the object's content; probeField names it in the
// rule's refusals.
const (
	probeAnnotation = "kubectl-fencekit/explain"
	probeField      = "metadata.annotations[" + probeAnnotation + "]"
)

// objectState is the state of an object recording epoch relative to lease.
func objectState(epoch int64, lease *coordinationv1.Lease) string {
	if lease == nil {
		return StateLeaseMissing
	}
	v := admission.ParseLease(lease, admission.Quorum)
	switch {
	case v.EpochErr != "":
		return StateLeaseInvalid
	case epoch == v.Epoch:
		return StateCurrent
	case epoch < v.Epoch:
		return StateBehind
	default:
		return StateAhead
	}
}

// WriteText prints the explanation: the object, its Lease, and a table of the judged writes.
func (e *Explanation) WriteText(w io.Writer, now time.Time) error {
	fmt.Fprintf(w, "%s %s/%s\n", e.Kind, e.Namespace, e.Name)
	if !e.Fenced {
		_, err := fmt.Fprintln(w, "  not declared by any FencingPolicy: fencekit does not fence its writes")
		return err
	}
	if e.Policy != "" {
		fmt.Fprintf(w, "  declared by FencingPolicy %s\n", e.Policy)
	}
	switch l := e.Lease; {
	case l == nil:
		fmt.Fprintf(w, "  lease %s: does not exist; every fenced write is refused until an elector holds it\n", e.LeaseName)
	case l.EpochError != "":
		fmt.Fprintf(w, "  lease %s: cannot fence: %s\n", e.LeaseName, l.EpochError)
	default:
		expiry := "no live holder"
		if l.ExpiresAt != nil {
			expiry = "expires " + relative(*l.ExpiresAt, now) + ", holder's safe-work deadline " + relative(*l.SafeWorkDeadline, now) + " (default drift and margin)"
		}
		fmt.Fprintf(w, "  lease %s: epoch %d, held by %s (acquired as %s), %s\n", e.LeaseName, l.Epoch, orNobody(l.Holder), orDash(l.Acquirer), expiry)
	}
	fmt.Fprintf(w, "  recorded epoch %d: %s\n", e.Epoch, e.State)
	if e.Note != "" {
		fmt.Fprintf(w, "  %s\n", e.Note)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WRITER\tEPOCH\tUSER\tVERDICT\tBY\tREASON\tWHY")
	for _, v := range e.Writes {
		verdict, epoch := "admitted", "-"
		if !v.Admitted {
			verdict = "refused"
		}
		if v.Epoch > 0 {
			epoch = strconv.FormatInt(v.Epoch, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Writer, epoch, orDash(v.User), verdict, orDash(v.Mechanism), orDash(v.Reason), orDash(v.Message))
	}
	return tw.Flush()
}

func toUnstructured(fr *fencingv1alpha1.FencedResource) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(fr)
	if err != nil {
		return nil, fmt.Errorf("converting FencedResource %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}
