package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	coordinationv1 "k8s.io/api/coordination/v1"
)

var leaseGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// gcFinalizers are the finalizers that decide what the garbage collector does with dependents.
var gcFinalizers = []string{"orphan", "foregroundDeletion"}

// content is an object's fenced content (docs/design/threat-model.md, allowlist.md, deletion.md): what no
// write without the current token may change. Field name to a canonical rendering.
type content map[string]string

// js renders v as JSON (as Go prints it, should it not encode).
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// contentOf is u's fenced content; nil u is an absent object.
func contentOf(u *unstructured.Unstructured) content {
	if u == nil {
		return content{"object": "absent"}
	}
	c := content{"object": "uid " + string(u.GetUID())}
	if u.GetDeletionTimestamp() != nil {
		c["deletion"] = "in progress"
	}
	if refs := u.GetOwnerReferences(); len(refs) > 0 {
		c["metadata.ownerReferences"] = js(refs)
	}
	var gc []string
	for _, f := range u.GetFinalizers() {
		if slices.Contains(gcFinalizers, f) {
			gc = append(gc, f)
		}
	}
	if len(gc) > 0 {
		slices.Sort(gc)
		c["metadata.finalizers (orphan, foregroundDeletion)"] = strings.Join(gc, ",")
	}
	for k, v := range u.GetAnnotations() {
		if strings.HasPrefix(k, "fencing.fencekit.io/") {
			c["metadata.annotations["+k+"]"] = v
		}
	}
	switch u.GetKind() {
	case "ConfigMap":
		for _, f := range []string{"data", "binaryData", "immutable"} {
			if v, ok := u.Object[f]; ok {
				c[f] = js(v)
			}
		}
		if v, ok := u.GetLabels()[coverageLabel]; ok {
			c["metadata.labels["+coverageLabel+"] (coverage)"] = v
		}
	case "Pod":
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		node, _ := spec["nodeName"].(string)
		delete(spec, "nodeName")
		c["spec"] = js(spec)
		c["spec.nodeName"] = node
	default:
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		c["spec"] = js(spec)
	}
	return c
}

// fieldChange is one changed field of an object's content.
type fieldChange struct {
	object, field, from, to string
}

func (f fieldChange) String() string {
	return fmt.Sprintf("%s: %s %s -> %s", f.object, f.field, short(f.from), short(f.to))
}

func short(s string) string {
	if s == "" {
		s = "(none)"
	}
	if len(s) > 120 {
		return s[:100] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

func diff(object string, before, after content) []fieldChange {
	var out []fieldChange
	keys := make([]string, 0, len(before)+len(after))
	for k := range before {
		keys = append(keys, k)
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if before[k] != after[k] {
			out = append(out, fieldChange{object: object, field: k, from: before[k], to: after[k]})
		}
	}
	return out
}

// worldObject is one of the world's fenced objects.
type worldObject struct{ resource, kind, name string }

func (o worldObject) String() string { return o.kind + " " + o.name }

func worldObjects() []worldObject {
	var out []worldObject
	for _, n := range fencedResources {
		out = append(out, worldObject{"fencedresources", "FencedResource", n})
	}
	for _, n := range configMaps {
		out = append(out, worldObject{"configmaps", "ConfigMap", n})
	}
	for _, n := range pods {
		out = append(out, worldObject{"pods", "Pod", n})
	}
	return out
}

// model is the fenced content of every world object as the holder last left it.
type model map[worldObject]content

func (w *world) read() (model, map[worldObject]*unstructured.Unstructured) {
	m, objs := model{}, map[worldObject]*unstructured.Unstructured{}
	for _, o := range worldObjects() {
		u := w.get(context.Background(), o.resource, o.name)
		m[o], objs[o] = contentOf(u), u
	}
	return m, objs
}

// allowed reports whether change f of object o (before: what it held before the step), after a write by a
// (nil: none of the actors) that the threat model lets through without a token, is the allowlist's: the
// garbage collector deletes objects that have owners and removes owner references; the scheduler binds a
// Pod (spec.nodeName, once), and the scheduler and kube-controller-manager's one credential delete a Pod
// bound to a node, node-b's kubelet one bound to node-b and binds to node-b (deletion.md: no world Pod
// has a controller owner); and the garbage collector's own
// consequences of an owner that is gone (the dependent deleted or orphaned).
func allowed(a *actor, o worldObject, before content, f fieldChange, ownerGone bool) bool {
	deletion := f.field == "object" && f.to == "absent" || f.field == "deletion"
	removesOwner := f.field == "metadata.ownerReferences" && len(f.to) < len(f.from)
	node := before["spec.nodeName"]
	podDeleter := a != nil && (a.name == actorScheduler || a.name == actorKCM || a.name == actorKubelet && node == kubeletNode)
	binder := a != nil && (a.name == actorScheduler || a.name == actorKubelet && f.to == kubeletNode)
	switch {
	case a != nil && a.gc && (deletion && before["metadata.ownerReferences"] != "" || removesOwner):
		return true
	case o.kind == "Pod" && deletion && podDeleter && node != "":
		return true
	case o.kind == "Pod" && f.field == "spec.nodeName" && f.from == "" && binder:
		return true
	case o.name == dependentName && ownerGone && (deletion || removesOwner):
		return true
	}
	return false
}

// coveredKinds are the kinds a tokenless create must not make (a ConfigMap only if it is labelled for the
// policy).
func createdCovered(u *unstructured.Unstructured) string {
	if u == nil {
		return ""
	}
	switch u.GetKind() {
	case "ConfigMap":
		if u.GetLabels()[coverageLabel] == coverageValue {
			return "created a covered ConfigMap " + u.GetName()
		}
	case "Pod":
		return "created a covered Pod " + u.GetName()
	case "FencedResource":
		data, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "data")
		epoch, _, _ := unstructured.NestedInt64(u.Object, "spec", "epoch")
		raised, _, _ := unstructured.NestedInt64(u.Object, "spec", "raisedEpoch")
		if data != nil || epoch != 0 || raised != 0 || len(u.GetOwnerReferences()) > 0 {
			return fmt.Sprintf("created FencedResource %s holding data %s, epoch %d, raisedEpoch %d, owners %s", u.GetName(), short(js(data)), epoch, raised, js(u.GetOwnerReferences()))
		}
	}
	return ""
}
