package admission

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Route is how a write reaches an object: its resource, and the subresource ("" for the object itself).
type Route struct {
	Resource    schema.GroupResource
	Subresource string
}

// Aliases maps a resource whose writes change objects of another resource to the route they stand for:
// the core API's bindings (kind Binding) bind the Pod named in their metadata, as pods/binding does. A
// webhook rule on pods and pods/* does not see them: their resource is bindings.
type Aliases map[schema.GroupResource]Route

// AliasesFrom derives the aliases from discovery (what the apiserver serves, as
// discovery.ServerGroupsAndResources lists it): a namespaced resource that can be created, whose kind is
// the kind of a subresource of another resource of the same group and version, and not that resource's
// own kind (pods/status is a Pod), is an alias of that subresource. Deriving them, rather than listing the
// ones known today, keeps a route an apiserver adds from going around the rule.
func AliasesFrom(lists []*metav1.APIResourceList) Aliases {
	out := Aliases{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		kinds := map[string]string{} // a resource's own kind
		for _, r := range list.APIResources {
			if !strings.Contains(r.Name, "/") {
				kinds[r.Name] = r.Kind
			}
		}
		for _, sub := range list.APIResources {
			parent, name, ok := strings.Cut(sub.Name, "/")
			if !ok || sub.Kind == kinds[parent] || (sub.Group != "" && sub.Group != gv.Group) {
				continue
			}
			for _, r := range list.APIResources {
				if strings.Contains(r.Name, "/") || r.Name == parent || r.Kind != sub.Kind || !r.Namespaced || !slices.Contains(r.Verbs, "create") {
					continue
				}
				out[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = Route{
					Resource: schema.GroupResource{Group: gv.Group, Resource: parent}, Subresource: name}
			}
		}
	}
	return out
}

// Of lists the aliases of resource gr's subresources, sorted: what a webhook that fences gr must also
// match.
func (a Aliases) Of(gr schema.GroupResource) []string {
	var out []string
	for alias, route := range a {
		if route.Resource == gr && alias.Group == gr.Group {
			out = append(out, alias.Resource)
		}
	}
	slices.Sort(out)
	return out
}

// Resolve returns the route a write to resource gr through subresource takes: the route gr stands for if
// it is an alias (a write to an alias names no subresource), gr and subresource otherwise.
func (a Aliases) Resolve(gr schema.GroupResource, subresource string) Route {
	if route, ok := a[gr]; ok && subresource == "" {
		return route
	}
	return Route{Resource: gr, Subresource: subresource}
}
