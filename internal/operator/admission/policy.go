package admission

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
)

// CarriesObject reports whether a write through subresource sends the object itself, labels included:
// the object (""), its status, and a Pod's ephemeral containers and resize.
func CarriesObject(subresource string) bool {
	switch subresource {
	case "", "status", "ephemeralcontainers", "resize":
		return true
	}
	return false
}

// Covered reports whether a policy of policies covers an object of group and resource (written through
// subresource, "" for the object itself) whose labels are labels. A Scale, an Eviction or a Binding carries
// no labels of the object: every policy naming the resource covers it, whatever its selector (the object
// webhook reads the object's labels first and asks again with subresource ""); a subresource that
// carries the object itself (CarriesObject) is judged by its labels. An invalid
// selector covers everything (fail closed; the policy's admission refuses it anyway).
//
// The webhook asks it twice, with the labels before and after the write: an object is fenced if it is
// covered before or after, so that a write changing a label cannot take an object out of a policy (or put
// one in) without the token; and only a write that leaves coverage as it was may be admitted on the copy
// of the Lease (copyEligible).
func Covered(policies []fencingv1alpha1.FencingPolicy, group, resource, subresource string, labelSet map[string]string) bool {
	foreign := !CarriesObject(subresource)
	for _, p := range policies {
		for _, entry := range p.Spec.Resources {
			if entry.Group != group || entry.Resource != resource {
				continue
			}
			if foreign || entry.Selector == nil {
				return true
			}
			sel, err := metav1.LabelSelectorAsSelector(entry.Selector)
			if err != nil || sel.Matches(labels.Set(labelSet)) {
				return true
			}
		}
	}
	return false
}

// refusedControllers are the cluster's own controllers that write objects of a resource a policy may
// declare, and that the rule refuses (their writes are not on the allowlist: they change the holder's
// data), with what breaks. Declaring such a resource is admitted, with a warning and the policy's
// ControllersRefused condition: an operator may mean it (it writes those objects itself), and a selector
// can keep the controller's objects out. The resources whose controllers the rule lets through (status
// writers, the garbage collector, the namespace controller, the TTL controller's deletes of finished
// Jobs, the volume binder, the token controller) and ConfigMap kube-root-ca.crt are not listed.
var refusedControllers = map[schema.GroupResource]string{
	{Group: "apps", Resource: "replicasets"}: "the Deployment controller (kube-system:deployment-controller) is refused creating, " +
		"scaling and updating the ReplicaSets of Deployments: rollouts stall; " + autoscalerRefused,
	{Group: "apps", Resource: "deployments"}:        autoscalerRefused,
	{Group: "apps", Resource: "statefulsets"}:       autoscalerRefused,
	{Group: "", Resource: "replicationcontrollers"}: autoscalerRefused,
	{Group: "", Resource: "pods"}: "the ReplicaSet, Job, StatefulSet and DaemonSet controllers are refused creating Pods the policy " +
		"covers: those workloads get no Pods (kubelets, the scheduler and the Pod garbage collectors still work)",
	{Group: "discovery.k8s.io", Resource: "endpointslices"}: "the EndpointSlice controllers (kube-system:endpointslice-controller, " +
		"endpointslicemirroring-controller) are refused: Services stop routing to new Pods",
	{Group: "", Resource: "endpoints"}:               "the endpoints controller (kube-system:endpoint-controller) is refused: Services stop routing to new Pods",
	{Group: "apps", Resource: "controllerrevisions"}: "the StatefulSet and DaemonSet controllers are refused recording revisions: their rollouts stall",
	{Group: "", Resource: "persistentvolumeclaims"}: "the StatefulSet controller is refused creating the claims of volumeClaimTemplates, " +
		"and the ephemeral volume controller (kube-system:ephemeral-volume-controller) the claims of Pods' ephemeral volumes " +
		"(the volume binder's binding is admitted)",
	{Group: "batch", Resource: "jobs"}: "the CronJob controller (kube-system:cronjob-controller) is refused creating the Jobs of CronJobs " +
		"and deleting them past their history limits: scheduled runs do not start (the Job controller's status writes are admitted)",
	{Group: "resource.k8s.io", Resource: "resourceclaims"}: "the resource claim controller (kube-system:resource-claim-controller) is refused " +
		"creating the claims of Pods' resourceClaimTemplates: those Pods do not start",
	{Group: "", Resource: "secrets"}: "Secrets written by controllers other than the token controller (for example a " +
		"cert-manager or sealed-secrets controller) are refused; ServiceAccount token Secrets are filled, and deleted by the " +
		"token controller (kube-system:tokens-controller) once their ServiceAccount is gone",
}

// autoscalerRefused is the warning for a scalable resource: its spec.replicas is the holder's.
const autoscalerRefused = "the horizontal Pod autoscaler (kube-system:horizontal-pod-autoscaler) is refused scaling them " +
	"(spec.replicas is the holder's, through the scale subresource too): autoscaling stops"

// RefusedControllers lists, for each resource p declares, the cluster's own controllers fencekit will
// refuse and what breaks, one sentence each, in the order of p's resources.
func RefusedControllers(p *fencingv1alpha1.FencingPolicy) []string {
	var out []string
	for _, e := range p.Spec.Resources {
		if what, ok := refusedControllers[schema.GroupResource{Group: e.Group, Resource: e.Resource}]; ok {
			gr := e.Resource
			if e.Group != "" {
				gr += "." + e.Group
			}
			out = append(out, "FencingPolicy "+p.Namespace+"/"+p.Name+" declares "+gr+": "+what)
		}
	}
	return out
}

// selectorsDisjoint reports whether no set of labels can match both selectors, judged from their
// matchLabels alone (a key both require with different values). Anything else counts as overlapping.
func selectorsDisjoint(a, b *metav1.LabelSelector) bool {
	if a == nil || b == nil {
		return false
	}
	for k, va := range a.MatchLabels {
		if vb, ok := b.MatchLabels[k]; ok && va != vb {
			return true
		}
	}
	return false
}

// ValidatePolicy checks what a FencingPolicy's schema cannot: its namespace, that every resource is a
// namespaced resource the apiserver serves (namespaced(group, resource) answers that: whether it is known,
// whether it is namespaced), its selectors, and that it overlaps no other policy of the namespace bound
// to a different Lease (others). Two entries overlap when they name the same group and resource and their
// selectors are not provably disjoint (a matchLabels key with two different values).
func ValidatePolicy(p *fencingv1alpha1.FencingPolicy, others []fencingv1alpha1.FencingPolicy,
	namespaced func(group, resource string) (known, isNamespaced bool, err error)) field.ErrorList {
	var errs field.ErrorList
	if p.Namespace == "kube-system" {
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "namespace"),
			"FencingPolicy "+p.Name+": objects in kube-system cannot be fenced: the cluster's own controllers write them"))
	}
	resources := field.NewPath("spec", "resources")
	for i, entry := range p.Spec.Resources {
		path := resources.Index(i)
		gr := entry.Resource
		if entry.Group != "" {
			gr += "." + entry.Group
		}
		known, isNamespaced, err := namespaced(entry.Group, entry.Resource)
		switch {
		case err != nil:
			errs = append(errs, field.InternalError(path, fmt.Errorf("looking up resource %s: %w", gr, err)))
		case !known:
			errs = append(errs, field.NotFound(path.Child("resource"), gr+" (the apiserver serves no such resource)"))
		case !isNamespaced:
			errs = append(errs, field.Invalid(path.Child("resource"), gr, "it is cluster-scoped: a FencingPolicy fences objects of its own namespace"))
		}
		if entry.Selector != nil {
			if _, err := metav1.LabelSelectorAsSelector(entry.Selector); err != nil {
				errs = append(errs, field.Invalid(path.Child("selector"), entry.Selector, err.Error()))
			}
		}
		for _, other := range others {
			if other.Name == p.Name || other.Spec.LeaseName == p.Spec.LeaseName {
				continue
			}
			for _, o := range other.Spec.Resources {
				if o.Group == entry.Group && o.Resource == entry.Resource && !selectorsDisjoint(entry.Selector, o.Selector) {
					errs = append(errs, field.Forbidden(path, fmt.Sprintf(
						"%s overlaps FencingPolicy %s/%s, which fences it for lease %s (this policy names lease %s): an object can be fenced by one Lease only; give both selectors a matchLabels key with different values, or bind both policies to one Lease",
						gr, other.Namespace, other.Name, other.Spec.LeaseName, p.Spec.LeaseName)))
				}
			}
		}
	}
	return errs
}

// Coverage is how the FencingPolicies of a namespace cover one write of one object: the one answer the
// object webhook decides by and `kubectl fencekit explain` reports.
type Coverage struct {
	// Policies are the policies that cover the object before or after the write, sorted by name; the
	// first one binds the object to its Lease. Empty: the object is not fenced.
	Policies []fencingv1alpha1.FencingPolicy
	// Conflict is a covering policy bound to another Lease than the first one (possible only when both
	// were admitted concurrently): every write of the object is refused until one of them is deleted.
	Conflict *fencingv1alpha1.FencingPolicy
	// Before and After report whether the object is covered before and after the write (Covered).
	Before, After bool
	// Recorded reports whether every covering policy has recorded its coverage for its current generation,
	// and Epoch is the highest of their coverage epochs: the copy of the Lease may decide only then, and
	// only above it.
	Recorded bool
	Epoch    int64
}

// CoverageOf is the coverage, by the policies of list, of a write of the object name of resource gr
// through subresource ("" for the object itself). old and updated are the object's labels before and
// after the write; before and after say whether the object exists on each side (a create has no old
// object, a delete no new one, and a selector is matched only against labels an object has). An object
// the cluster itself owns (fencingv1alpha1.ClusterOwned) is covered by no policy.
func CoverageOf(list []fencingv1alpha1.FencingPolicy, gr schema.GroupResource, subresource, name string,
	old, updated map[string]string, before, after bool) Coverage {
	var c Coverage
	if fencingv1alpha1.ClusterOwned(gr.Group, gr.Resource, name) {
		return c
	}
	for _, p := range list {
		one := []fencingv1alpha1.FencingPolicy{p}
		b := before && Covered(one, gr.Group, gr.Resource, subresource, old)
		a := after && Covered(one, gr.Group, gr.Resource, subresource, updated)
		if b || a {
			c.Policies = append(c.Policies, p)
			c.Before, c.After = c.Before || b, c.After || a
		}
	}
	if len(c.Policies) == 0 {
		return c
	}
	slices.SortFunc(c.Policies, func(a, b fencingv1alpha1.FencingPolicy) int { return strings.Compare(a.Name, b.Name) })
	c.Recorded = true
	for i, p := range c.Policies {
		if c.Conflict == nil && p.Spec.LeaseName != c.Policies[0].Spec.LeaseName {
			c.Conflict = &c.Policies[i]
		}
		c.Recorded = c.Recorded && p.Status.CoverageGeneration == p.Generation
		c.Epoch = max(c.Epoch, p.Status.CoverageEpoch)
	}
	return c
}
