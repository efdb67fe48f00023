package attack

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// covered are the resources the world fences: FencedResources, and what its FencingPolicy covers.
var covered = []schema.GroupResource{
	{Group: "", Resource: "configmaps"},
	{Group: "", Resource: "pods"},
	{Group: "fencing.fencekit.io", Resource: "fencedresources"},
}

// route is one way to write a covered object that discovery lists: a resource, one of its subresources,
// or a top-level resource whose kind is a covered resource's subresource kind (core bindings, kind
// Binding like pods/binding), with the verbs discovery lists for it.
type route struct {
	gvr schema.GroupVersionResource
	// sub is the subresource ("status", "binding"), "" for the resource itself.
	sub string
	// kind is the kind the route reads and writes (Binding for pods/binding).
	kind string
	// parent is the covered resource whose objects the route writes.
	parent schema.GroupResource
	// parentKind is that resource's kind.
	parentKind string
	// topLevel is set for a top-level resource found by its kind (core bindings).
	topLevel bool
	verbs    []string
}

func (r route) String() string {
	s := r.gvr.Resource
	if r.gvr.Group != "" {
		s += "." + r.gvr.Group
	}
	if r.sub != "" {
		s += "/" + r.sub
	}
	return s
}

// writeVerbs are the discovery verbs a step may use.
var writeVerbs = []string{"create", "update", "patch", "delete", "deletecollection"}

// builtIn reports whether the route is served by the apiserver's own types (which accept strategic merge
// patches), not by a CRD.
func (r route) builtIn() bool {
	return !strings.Contains(r.gvr.Group, ".") || strings.HasSuffix(r.gvr.Group, ".k8s.io")
}

// discoverRoutes lists the write routes of the covered resources from the apiserver's discovery, and the
// routes it skips (connect subresources, which proxy to a kubelet and write no object, and read-only ones),
// sorted so that a seed picks the same routes on every run.
func discoverRoutes(cfg *rest.Config) (routes []route, skipped []string, err error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		return nil, nil, fmt.Errorf("discovery: %w", err)
	}
	parentKinds := map[schema.GroupResource]string{}
	subKinds := map[string]schema.GroupResource{}
	type found struct {
		gv  schema.GroupVersion
		res string
		r   route
	}
	var all []found
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, nil, err
		}
		for _, res := range l.APIResources {
			base, sub, _ := strings.Cut(res.Name, "/")
			gr := schema.GroupResource{Group: gv.Group, Resource: base}
			r := route{gvr: gv.WithResource(base), sub: sub, kind: res.Kind, parent: gr, verbs: res.Verbs}
			all = append(all, found{gv: gv, res: res.Name, r: r})
			if !slices.Contains(covered, gr) {
				continue
			}
			if sub == "" {
				parentKinds[gr] = res.Kind
			} else if _, ok := subKinds[res.Kind]; !ok {
				subKinds[res.Kind] = gr
			}
		}
	}
	for _, f := range all {
		r := f.r
		switch {
		case slices.Contains(covered, r.parent):
			r.parentKind = parentKinds[r.parent]
		case r.sub == "" && subKinds[r.kind] != (schema.GroupResource{}) && !isParentKind(parentKinds, r.kind):
			// A top-level resource of a covered subresource's kind: core bindings (kind Binding).
			r.topLevel, r.parent = true, subKinds[r.kind]
			r.parentKind = parentKinds[r.parent]
		default:
			continue
		}
		if !slices.ContainsFunc(r.verbs, func(v string) bool { return slices.Contains(writeVerbs, v) }) {
			skipped = append(skipped, r.String()+" (no write verb)")
			continue
		}
		if strings.HasSuffix(r.kind, "Options") {
			skipped = append(skipped, r.String()+" (connect: "+r.kind+")")
			continue
		}
		routes = append(routes, r)
	}
	slices.SortFunc(routes, func(a, b route) int { return strings.Compare(a.String()+a.gvr.Version, b.String()+b.gvr.Version) })
	routes = slices.CompactFunc(routes, func(a, b route) bool { return a.String() == b.String() })
	slices.Sort(skipped)
	return routes, slices.Compact(skipped), nil
}

func isParentKind(parentKinds map[schema.GroupResource]string, kind string) bool {
	for _, k := range parentKinds {
		if k == kind {
			return true
		}
	}
	return false
}
