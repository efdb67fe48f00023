package attack

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// changeEnv is what a change needs to know when it runs: the Lease's current epoch and the UIDs of the
// objects an owner reference may name.
type changeEnv struct {
	ns    string
	epoch int64
	uids  map[string]string
}

// epochValue resolves "current", "stale", "future", "huge" against the current epoch.
func (e changeEnv) epochValue(v string) int64 {
	switch v {
	case "current":
		return e.epoch
	case "stale":
		return max(e.epoch-1, 0)
	case "future":
		return e.epoch + 1
	case "huge":
		return protocol.MaxEpoch
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// freshObject is a new object of kind named name, as an attacker would create it.
func freshObject(kind, ns, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": name, "namespace": ns}}}
	switch kind {
	case "ConfigMap":
		u.SetAPIVersion("v1")
		u.SetKind("ConfigMap")
		u.SetLabels(map[string]string{coverageLabel: coverageValue})
		u.Object["data"] = map[string]any{"v": "attacker"}
	case "Pod":
		u.SetAPIVersion("v1")
		u.SetKind("Pod")
		u.Object["spec"] = map[string]any{"containers": []any{map[string]any{"name": "app", "image": podImage}}}
	default:
		u.SetAPIVersion(fencingv1alpha1.GroupVersion.String())
		u.SetKind("FencedResource")
		u.Object["spec"] = map[string]any{"leaseName": leaseName}
	}
	return u
}

// apply changes u as c says. It reports false when the change does not apply to u's kind (the write is
// then sent unchanged).
func (c change) apply(u *unstructured.Unstructured, e changeEnv) bool {
	kind := u.GetKind()
	switch c.name {
	case "create-plain":
	case "label-add":
		setMapKey(u, []string{"metadata", "labels"}, c.key, c.value)
	case "label-coverage":
		if c.value == "" {
			unstructured.RemoveNestedField(u.Object, "metadata", "labels", coverageLabel)
		} else {
			setMapKey(u, []string{"metadata", "labels"}, coverageLabel, c.value)
		}
	case "annotation-add":
		setMapKey(u, []string{"metadata", "annotations"}, c.key, c.value)
	case "annotation-fencekit":
		switch c.value {
		case "remove":
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations", c.key)
		case "":
			setMapKey(u, []string{"metadata", "annotations"}, c.key, "")
		default:
			v := strconv.FormatInt(e.epochValue(c.value), 10)
			if c.key == fencingv1alpha1.WriterAnnotation {
				v = "intruder"
			}
			setMapKey(u, []string{"metadata", "annotations"}, c.key, v)
		}
	case "finalizer-add":
		if f := u.GetFinalizers(); !slices.Contains(f, c.value) {
			u.SetFinalizers(append(f, c.value))
		}
	case "finalizers-many":
		f := u.GetFinalizers()
		for i := range c.n {
			f = append(f, fmt.Sprintf("example.com/f-%d", i))
		}
		u.SetFinalizers(f)
	case "finalizers-clear":
		u.SetFinalizers(nil)
	case "owner-add":
		refs := u.GetOwnerReferences()
		refs = append(refs, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: c.value, UID: types.UID(e.uids[c.value])})
		u.SetOwnerReferences(refs)
	case "owner-remove":
		u.SetOwnerReferences(nil)
	case "managed-move", "managed-epoch-entry", "managed-gain-free":
		return c.changeManaged(u, e)
	case "data-set":
		if kind != "ConfigMap" {
			return false
		}
		setMapKey(u, []string{"data"}, c.key, c.value)
	case "data-remove":
		unstructured.RemoveNestedField(u.Object, "data", c.key)
	case "binary-data":
		setMapKey(u, []string{"binaryData"}, c.key, base64.StdEncoding.EncodeToString([]byte(c.value)))
	case "immutable":
		u.Object["immutable"] = true
	case "spec-data":
		if kind != "FencedResource" {
			return false
		}
		data, _, _ := unstructured.NestedMap(u.Object, "spec", "data")
		if data == nil {
			data = map[string]any{}
		}
		data[c.key] = c.value
		_ = unstructured.SetNestedMap(u.Object, data, "spec", "data")
	case "spec-epoch":
		_ = unstructured.SetNestedField(u.Object, e.epochValue(c.value), "spec", "epoch")
	case "spec-raised-epoch":
		_ = unstructured.SetNestedField(u.Object, e.epochValue(c.value), "spec", "raisedEpoch")
	case "spec-lease":
		_ = unstructured.SetNestedField(u.Object, c.value, "spec", "leaseName")
	case "pod-deadline":
		n, _ := strconv.ParseInt(c.value, 10, 64)
		_ = unstructured.SetNestedField(u.Object, n, "spec", "activeDeadlineSeconds")
	case "pod-image":
		return setContainer(u, "containers", func(ctr map[string]any) { ctr["image"] = c.value })
	case "pod-toleration":
		tol, _, _ := unstructured.NestedSlice(u.Object, "spec", "tolerations")
		tol = append(tol, map[string]any{"key": c.value, "operator": "Exists", "effect": "NoSchedule"})
		_ = unstructured.SetNestedSlice(u.Object, tol, "spec", "tolerations")
	case "status":
		if kind == "FencedResource" {
			_ = unstructured.SetNestedField(u.Object, c.value, "status", "holder")
		} else {
			_ = unstructured.SetNestedField(u.Object, c.value, "status", "message")
		}
	case "ephemeral-container":
		ecs, _, _ := unstructured.NestedSlice(u.Object, "spec", "ephemeralContainers")
		ecs = append(ecs, map[string]any{"name": c.value, "image": "busybox:1.36", "targetContainerName": "app"})
		_ = unstructured.SetNestedSlice(u.Object, ecs, "spec", "ephemeralContainers")
	case "resize":
		return setContainer(u, "containers", func(ctr map[string]any) {
			ctr["resources"] = map[string]any{"requests": map[string]any{"cpu": c.value}}
		})
	default:
		return false
	}
	return true
}

func setMapKey(u *unstructured.Unstructured, path []string, key, value string) {
	m, _, _ := unstructured.NestedStringMap(u.Object, path...)
	if m == nil {
		m = map[string]string{}
	}
	m[key] = value
	_ = unstructured.SetNestedStringMap(u.Object, m, path...)
}

func setContainer(u *unstructured.Unstructured, field string, change func(map[string]any)) bool {
	ctrs, _, _ := unstructured.NestedSlice(u.Object, "spec", field)
	if len(ctrs) == 0 {
		return false
	}
	ctr, _ := ctrs[0].(map[string]any)
	change(ctr)
	_ = unstructured.SetNestedSlice(u.Object, ctrs, "spec", field)
	return true
}

// managedEntries reads u's managedFields as JSON maps.
func managedEntries(u *unstructured.Unstructured) []map[string]any {
	list, _, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
	out := make([]map[string]any, 0, len(list))
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func setManagedEntries(u *unstructured.Unstructured, es []map[string]any) {
	list := make([]any, len(es))
	for i, e := range es {
		list[i] = e
	}
	_ = unstructured.SetNestedSlice(u.Object, list, "metadata", "managedFields")
}

func isEpochManager(e map[string]any) bool {
	m, _ := e["manager"].(string)
	return strings.HasPrefix(m, protocol.FieldManagerPrefix)
}

// changeManaged changes ownership without changing a field: moves a data field from the holder's Update
// entry into its Apply entry (or a new entry), adds an entry for a token manager, or gives the holder's
// entry a free field (a finalizer).
func (c change) changeManaged(u *unstructured.Unstructured, e changeEnv) bool {
	es := managedEntries(u)
	content := "f:data"
	if u.GetKind() != "ConfigMap" {
		content = "f:spec"
	}
	switch c.name {
	case "managed-move":
		from, to := -1, -1
		for i, en := range es {
			fields, _ := en["fieldsV1"].(map[string]any)
			if isEpochManager(en) && en["operation"] == "Update" && fields[content] != nil && from < 0 {
				from = i
			}
			if isEpochManager(en) && en["operation"] == "Apply" {
				to = i
			}
		}
		if from < 0 {
			return false
		}
		src, _ := es[from]["fieldsV1"].(map[string]any)[content].(map[string]any)
		var moved string
		for k := range src {
			if k != "." && (moved == "" || k < moved) {
				moved = k
			}
		}
		if moved == "" {
			return false
		}
		val := src[moved]
		delete(src, moved)
		if to < 0 {
			es = append(es, map[string]any{"manager": "intruder", "operation": "Apply", "apiVersion": u.GetAPIVersion(),
				"fieldsType": "FieldsV1", "fieldsV1": map[string]any{}})
			to = len(es) - 1
		}
		dst, _ := es[to]["fieldsV1"].(map[string]any)
		sub, _ := dst[content].(map[string]any)
		if sub == nil {
			sub = map[string]any{}
			dst[content] = sub
		}
		sub[moved] = val
	case "managed-epoch-entry":
		es = append(es, map[string]any{"manager": protocol.FieldManagerFor(e.epoch), "operation": "Update", "apiVersion": u.GetAPIVersion(),
			"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:metadata": map[string]any{"f:finalizers": map[string]any{".": map[string]any{}}}}})
	case "managed-gain-free":
		i := slices.IndexFunc(es, isEpochManager)
		if i < 0 {
			return false
		}
		fields, _ := es[i]["fieldsV1"].(map[string]any)
		md, _ := fields["f:metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			fields["f:metadata"] = md
		}
		md["f:finalizers"] = map[string]any{".": map[string]any{}, `v:"example.com/owned"`: map[string]any{}}
	}
	setManagedEntries(u, es)
	return true
}

// patchFor is the patch of verb (merge, json, strategic, apply) from old to updated, its type and the field
// manager to send it with (an apply needs one: "attacker-apply" when mgr is empty). force leads a JSON patch
// with a test of the resourceVersion.
func patchFor(verb string, old, updated *unstructured.Unstructured, force bool, mgr string) ([]byte, types.PatchType, string, error) {
	switch verb {
	case "merge":
		data, err := mergePatch(old, updated)
		return data, types.MergePatchType, mgr, err
	case "json":
		data, err := jsonPatch(old, updated, force)
		return data, types.JSONPatchType, mgr, err
	case "strategic":
		data, err := strategicPatch(old, updated)
		return data, types.StrategicMergePatchType, mgr, err
	case "apply":
		if mgr == "" {
			mgr = "attacker-apply"
		}
		data, err := applyBody(old, updated)
		return data, types.ApplyPatchType, mgr, err
	}
	return nil, "", mgr, fmt.Errorf("no patch for verb %q", verb)
}

// mergePatch is the JSON merge patch from old to updated.
func mergePatch(old, updated *unstructured.Unstructured) ([]byte, error) {
	a, err := json.Marshal(old.Object)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(updated.Object)
	if err != nil {
		return nil, err
	}
	return jsonpatch.CreateMergePatch(a, b)
}

// strategicPatch is the strategic merge patch from old to updated, for a built-in kind.
func strategicPatch(old, updated *unstructured.Unstructured) ([]byte, error) {
	a, err := json.Marshal(old.Object)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(updated.Object)
	if err != nil {
		return nil, err
	}
	var schema any = &corev1.ConfigMap{}
	if old.GetKind() == "Pod" {
		schema = &corev1.Pod{}
	}
	return strategicpatch.CreateTwoWayMergePatch(a, b, schema)
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// jsonPatch is a JSON patch from old to updated: add, replace or remove of each changed key, objects
// descended into (lists replaced whole), led by a test of the resourceVersion when testRV.
func jsonPatch(old, updated *unstructured.Unstructured, testRV bool) ([]byte, error) {
	var ops []jsonPatchOp
	if testRV {
		ops = append(ops, jsonPatchOp{Op: "test", Path: "/metadata/resourceVersion", Value: old.GetResourceVersion()})
	}
	ops = diffOps(ops, "", old.Object, updated.Object)
	return json.Marshal(ops)
}

func diffOps(ops []jsonPatchOp, prefix string, a, b map[string]any) []jsonPatchOp {
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
	for _, k := range keys {
		p := prefix + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
		av, inA := a[k]
		bv, inB := b[k]
		switch {
		case !inB:
			ops = append(ops, jsonPatchOp{Op: "remove", Path: p})
		case !inA:
			ops = append(ops, jsonPatchOp{Op: "add", Path: p, Value: bv})
		default:
			am, aIsMap := av.(map[string]any)
			bm, bIsMap := bv.(map[string]any)
			if aIsMap && bIsMap {
				ops = diffOps(ops, p, am, bm)
				continue
			}
			if js(av) != js(bv) {
				ops = append(ops, jsonPatchOp{Op: "replace", Path: p, Value: bv})
			}
		}
	}
	return ops
}

// applyBody is a server-side apply configuration for what updated sets over old: the merge patch's
// values (removals cannot be applied: the manager simply leaves them out).
func applyBody(old, updated *unstructured.Unstructured) ([]byte, error) {
	patch, err := mergePatch(old, updated)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	m = withoutNulls(m)
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
	}
	md["name"], md["namespace"] = updated.GetName(), updated.GetNamespace()
	m["metadata"] = md
	m["apiVersion"], m["kind"] = updated.GetAPIVersion(), updated.GetKind()
	return json.Marshal(m)
}

func withoutNulls(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		switch v := v.(type) {
		case nil:
		case map[string]any:
			out[k] = withoutNulls(v)
		default:
			out[k] = v
		}
	}
	return out
}
