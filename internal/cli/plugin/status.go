package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// EventSource is the reporting controller of the Events fencekit's webhooks record for refused writes.
const EventSource = "fencekit-webhook"

// StatusReport is what `kubectl fencekit status` shows.
type StatusReport struct {
	Leases          []LeaseStatus    `json:"leases"`
	FencedResources []ResourceStatus `json:"fencedResources"`
	Refusals        []Refusal        `json:"refusals"`
}

// LeaseStatus is one fenced Lease (label fencing.fencekit.io/fenced=true).
type LeaseStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Holder is empty when the Lease was released.
	Holder   string `json:"holder"`
	Acquirer string `json:"acquirer"`
	Epoch    int64  `json:"epoch"`
	// EpochError says why the Lease has no valid epoch (Epoch is then 0).
	EpochError string `json:"epochError,omitempty"`
	// ExpiresAt is renewTime + leaseDurationSeconds, when both are set and the Lease has a holder.
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	// SafeWorkDeadline is when the holder's authority ends if it runs with the elector's default
	// MaxClockDrift and SafetyMargin: renewTime + leaseDuration*(1-0.01) - 2s (the holder measures it from
	// its own send time, which precedes renewTime; its real configuration may differ).
	SafeWorkDeadline *time.Time `json:"safeWorkDeadline,omitempty"`
	// BoundResources and BehindResources count the FencedResources bound to the Lease, and those of them
	// whose epoch is below the Lease's.
	BoundResources  int `json:"boundResources"`
	BehindResources int `json:"behindResources"`
	// Policies are the FencingPolicies bound to the Lease.
	Policies []string `json:"policies,omitempty"`
}

// Resource states, relative to the bound Lease.
const (
	StateCurrent      = "Current"       // at the Lease's epoch
	StateBehind       = "Behind"        // below it: the holder has not written (or fenced) it at its epoch yet
	StateAhead        = "Ahead"         // above it: the Lease was recreated
	StateLeaseMissing = "LeaseNotFound" // the Lease does not exist
	StateLeaseInvalid = "LeaseInvalid"  // the Lease carries no valid epoch
)

// ResourceStatus is one FencedResource.
type ResourceStatus struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Lease      string `json:"lease"`
	Epoch      int64  `json:"epoch"`
	LeaseEpoch int64  `json:"leaseEpoch"`
	// State is one of Current, Behind, Ahead, LeaseNotFound, LeaseInvalid, computed from the Lease as read now.
	State  string `json:"state"`
	Behind bool   `json:"behind"`
	// Ready and ReadyReason are the operator's Ready condition, as last written ("" if none yet).
	Ready       string `json:"ready"`
	ReadyReason string `json:"readyReason"`
}

// Refusal is a write refused by a fencekit webhook, from its Event.
type Refusal struct {
	Time      time.Time `json:"time"`
	Namespace string    `json:"namespace"`
	Kind      string    `json:"kind"`
	Name      string    `json:"name"`
	Reason    string    `json:"reason"`
	Action    string    `json:"action"`
	Note      string    `json:"note"`
	// Count is how many times the apiserver's Event series saw this refusal (1 without a series).
	Count int32 `json:"count"`
}

// Status reads the fenced Leases, FencedResources, FencingPolicies and the latest refusals (at most
// refusals of them) of namespace ("" for all).
func Status(ctx context.Context, c client.Reader, namespace string, refusals int, now time.Time) (*StatusReport, error) {
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(namespace), client.MatchingLabels{protocol.FencedLabel: "true"}); err != nil {
		return nil, fmt.Errorf("listing fenced Leases: %w", err)
	}
	var frs fencingv1alpha1.FencedResourceList
	if err := c.List(ctx, &frs, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing FencedResources: %w", err)
	}
	var policies fencingv1alpha1.FencingPolicyList
	if err := c.List(ctx, &policies, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing FencingPolicies: %w", err)
	}
	byKey := map[string]*coordinationv1.Lease{}
	for i := range leases.Items {
		l := &leases.Items[i]
		byKey[l.Namespace+"/"+l.Name] = l
	}
	// A FencedResource may name a Lease without the label (or none): read those one by one rather than
	// listing every Lease (kube-node-lease holds one per node).
	for _, fr := range frs.Items {
		k := fr.Namespace + "/" + fr.Spec.LeaseName
		if _, seen := byKey[k]; seen {
			continue
		}
		l, err := readLease(ctx, c, fr.Namespace, fr.Spec.LeaseName)
		if err != nil {
			return nil, err
		}
		byKey[k] = l // nil: it does not exist
	}

	r := &StatusReport{Leases: []LeaseStatus{}, FencedResources: []ResourceStatus{}, Refusals: []Refusal{}}
	index := map[string]int{}
	for _, l := range leases.Items {
		index[l.Namespace+"/"+l.Name] = len(r.Leases)
		r.Leases = append(r.Leases, leaseStatus(&l))
	}
	for _, fr := range frs.Items {
		rs := resourceStatus(&fr, byKey[fr.Namespace+"/"+fr.Spec.LeaseName])
		r.FencedResources = append(r.FencedResources, rs)
		if i, ok := index[fr.Namespace+"/"+fr.Spec.LeaseName]; ok {
			r.Leases[i].BoundResources++
			if rs.Behind {
				r.Leases[i].BehindResources++
			}
		}
	}
	for _, p := range policies.Items {
		if i, ok := index[p.Namespace+"/"+p.Spec.LeaseName]; ok {
			r.Leases[i].Policies = append(r.Leases[i].Policies, p.Name)
		}
	}
	var err error
	if r.Refusals, err = latestRefusals(ctx, c, namespace, refusals); err != nil {
		return nil, err
	}
	return r, nil
}

// leaseStatus reads l with admission.ParseLease, the webhook's own parser.
func leaseStatus(l *coordinationv1.Lease) LeaseStatus {
	v := admission.ParseLease(l, admission.Quorum)
	s := LeaseStatus{Namespace: l.Namespace, Name: l.Name, Holder: v.Holder, Acquirer: v.Acquirer, Epoch: v.Epoch, EpochError: v.EpochErr}
	if v.Holder != "" && v.Duration > 0 && !v.RenewTime.IsZero() {
		expires := v.RenewTime.Add(v.Duration)
		deadline := v.RenewTime.Add(elector.SafeWindow(v.Duration, elector.DefaultMaxClockDrift, elector.DefaultSafetyMargin))
		s.ExpiresAt, s.SafeWorkDeadline = &expires, &deadline
	}
	return s
}

// resourceStatus is fr's state relative to lease (nil if it does not exist).
func resourceStatus(fr *fencingv1alpha1.FencedResource, lease *coordinationv1.Lease) ResourceStatus {
	s := ResourceStatus{Namespace: fr.Namespace, Name: fr.Name, Lease: fr.Spec.LeaseName, Epoch: fr.Spec.FencedEpoch()}
	if c := meta.FindStatusCondition(fr.Status.Conditions, fencingv1alpha1.ConditionReady); c != nil {
		s.Ready, s.ReadyReason = string(c.Status), c.Reason
	}
	switch {
	case lease == nil:
		s.State = StateLeaseMissing
		return s
	case admission.ParseLease(lease, admission.Quorum).EpochErr != "":
		s.State = StateLeaseInvalid
		return s
	}
	s.LeaseEpoch = admission.ParseLease(lease, admission.Quorum).Epoch
	switch {
	case s.Epoch == s.LeaseEpoch:
		s.State = StateCurrent
	case s.Epoch < s.LeaseEpoch:
		s.State, s.Behind = StateBehind, true
	default:
		s.State = StateAhead
	}
	return s
}

// latestRefusals lists the latest n Events recorded by fencekit's webhooks in namespace, newest first.
func latestRefusals(ctx context.Context, c client.Reader, namespace string, n int) ([]Refusal, error) {
	var events eventsv1.EventList
	// The apiserver selects Events by their reporting controller.
	if err := c.List(ctx, &events, client.InNamespace(namespace), client.MatchingFields{"reportingController": EventSource}); err != nil {
		return nil, fmt.Errorf("listing Events: %w", err)
	}
	out := []Refusal{}
	for _, e := range events.Items {
		if e.ReportingController != EventSource {
			continue
		}
		r := Refusal{Time: e.EventTime.Time, Namespace: e.Namespace, Kind: e.Regarding.Kind, Name: e.Regarding.Name,
			Reason: e.Reason, Action: e.Action, Note: e.Note, Count: 1}
		if e.Series != nil {
			r.Count = e.Series.Count
			if t := e.Series.LastObservedTime.Time; t.After(r.Time) {
				r.Time = t
			}
		}
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b Refusal) int { return b.Time.Compare(a.Time) })
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// WriteTables prints the report as three tables, times relative to now.
func (r *StatusReport) WriteTables(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASES")
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tHOLDER\tEPOCH\tEXPIRES\tSAFE-WORK DEADLINE\tRESOURCES\tBEHIND\tPOLICIES")
	for _, l := range r.Leases {
		holder, epoch, expires, deadline := l.Holder, strconv.FormatInt(l.Epoch, 10), "-", "-"
		if holder == "" {
			holder = "<released>"
		}
		if l.EpochError != "" {
			epoch = "<invalid>"
		}
		if l.ExpiresAt != nil {
			expires, deadline = relative(*l.ExpiresAt, now), relative(*l.SafeWorkDeadline, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", l.Namespace, l.Name, holder, epoch, expires, deadline,
			l.BoundResources, l.BehindResources, orDash(strings.Join(l.Policies, ",")))
	}
	fmt.Fprintln(tw, "\nFENCED RESOURCES")
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tLEASE\tEPOCH\tLEASE EPOCH\tSTATE\tREADY\tREASON")
	for _, s := range r.FencedResources {
		leaseEpoch := "-"
		if s.LeaseEpoch > 0 {
			leaseEpoch = strconv.FormatInt(s.LeaseEpoch, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, s.Lease, s.Epoch, leaseEpoch, s.State,
			orDash(s.Ready), orDash(s.ReadyReason))
	}
	fmt.Fprintln(tw, "\nRECENT REFUSALS (by fencekit's webhooks; refusals by the CRD rule are counted by the writer, see docs/kubectl-plugin.md)")
	fmt.Fprintln(tw, "LAST SEEN\tNAMESPACE\tOBJECT\tREASON\tCOUNT\tMESSAGE")
	for _, e := range r.Refusals {
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%d\t%s\n", relative(e.Time, now), e.Namespace, e.Kind, e.Name, e.Reason, e.Count, e.Note)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
