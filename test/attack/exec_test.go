package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Outcomes of a request.
const (
	admitted = "admitted"
	refused  = "refused"  // by fencekit (a fencing reason)
	rejected = "rejected" // by the apiserver or RBAC (validation, conflict, not found, forbidden)
	failed   = "error"    // 5xx, timeouts
)

// result is what a step's request met.
type result struct {
	outcome string
	code    int32
	reason  protocol.Reason
	msg     string
	// returned is the object the apiserver returned for an admitted write (a dry run's too).
	returned *unstructured.Unstructured
	// detail is the request as resolved when it ran: the field manager, the size of the body.
	detail string
	// n counts the requests of a step that sends many (declarations), admitted ones in nAdmitted.
	n, nAdmitted int
}

func (r result) String() string {
	s := r.outcome
	if r.n > 0 {
		s = fmt.Sprintf("%d of %d admitted", r.nAdmitted, r.n)
	}
	if r.reason != "" {
		s += " (" + string(r.reason) + ")"
	} else if r.code != 0 {
		s += fmt.Sprintf(" (%d)", r.code)
	}
	if r.outcome != admitted && r.msg != "" {
		m := r.msg
		if len(m) > 200 {
			m = m[:200] + "..."
		}
		s += ": " + m
	}
	return s
}

func classify(err error) result {
	if err == nil {
		return result{outcome: admitted}
	}
	r := result{msg: err.Error(), reason: fencing.ReasonOf(err)}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		r.code = status.Status().Code
	}
	switch {
	case r.reason != "":
		r.outcome = refused
	case r.code >= 500 || r.code == 0:
		r.outcome = failed
	default:
		r.outcome = rejected
	}
	return r
}

// etcdLimit is etcd's default request limit (--max-request-bytes, 1.5 MiB), which envtest's etcd keeps.
const etcdLimit = 1536 * 1024

// changeEnv is what the changes of a step need, read now.
func (w *world) changeEnv() changeEnv {
	e := changeEnv{ns: w.ns, epoch: w.token().Epoch, uids: map[string]string{}}
	if e.epoch == 0 {
		e.epoch = w.leaseEpoch()
	}
	for _, name := range []string{"bait", ownerName} {
		if u, err := w.admin.Resource(gvrConfigMaps).Namespace(w.ns).Get(context.Background(), name, metav1.GetOptions{}); err == nil {
			e.uids[name] = string(u.GetUID())
		}
	}
	return e
}

// leaseEpoch is the Lease's epoch as stored.
func (w *world) leaseEpoch() int64 {
	u, err := w.admin.Resource(leaseGVR).Namespace(w.ns).Get(context.Background(), leaseName, metav1.GetOptions{})
	if err != nil {
		return 0
	}
	e, _ := protocol.ParseEpoch(u.GetAnnotations()[protocol.EpochAnnotation])
	return e
}

// fieldManager resolves m against the current epoch.
func fieldManager(m managerSpec, epoch int64) string {
	switch m.kind {
	case "tool", "raw":
		return m.name
	case "epoch":
		return protocol.FieldManagerFor(max(epoch+m.rel, 1))
	}
	return ""
}

// get reads a world object as an admin (nil if it does not exist).
func (w *world) get(ctx context.Context, resource, name string) *unstructured.Unstructured {
	u, err := w.admin.Resource(gvrOf(resource)).Namespace(w.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return u
}

// write runs a kWrite step.
func (w *world) write(s step) result {
	a := w.actors[s.actor]
	ctx, cancel := context.WithTimeout(w.t.Context(), stepTimeout)
	defer cancel()
	e := w.changeEnv()
	mgr := fieldManager(s.manager, e.epoch)
	ri := a.dyn.Resource(s.route.gvr).Namespace(w.ns)
	var dry []string
	if s.dryRun {
		dry = []string{metav1.DryRunAll}
	}
	var subs []string
	if s.route.sub != "" {
		subs = []string{s.route.sub}
	}
	cur := w.get(ctx, s.route.parent.Resource, s.target)
	skeleton := freshObject(s.route.parentKind, w.ns, s.target)
	if cur == nil {
		cur = skeleton
	}
	detail := ""
	if mgr != "" {
		detail = "fieldManager " + mgr
	}
	var (
		out *unstructured.Unstructured
		err error
	)
	switch s.verb {
	case "create":
		body := skeleton
		switch {
		case s.route.kind == "Binding":
			body = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Binding",
				"metadata": map[string]any{"name": s.target, "namespace": w.ns},
				"target":   map[string]any{"apiVersion": "v1", "kind": "Node", "name": s.change.value}}}
		case s.route.kind == "Eviction":
			body = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "policy/v1", "kind": "Eviction",
				"metadata": map[string]any{"name": s.target, "namespace": w.ns}}}
		case s.route.sub != "":
			body = cur.DeepCopy()
			s.change.apply(body, e)
		default:
			s.change.apply(body, e)
		}
		out, err = ri.Create(ctx, body, metav1.CreateOptions{FieldManager: mgr, DryRun: dry}, subs...)
	case "update":
		upd := cur.DeepCopy()
		s.change.apply(upd, e)
		out, err = ri.Update(ctx, upd, metav1.UpdateOptions{FieldManager: mgr, DryRun: dry}, subs...)
	case "merge", "json", "strategic", "apply":
		upd := cur.DeepCopy()
		s.change.apply(upd, e)
		var (
			data []byte
			pt   types.PatchType
		)
		data, pt, mgr, err = patchFor(s.verb, cur, upd, s.force, mgr)
		if err != nil {
			return result{outcome: failed, msg: "building the patch: " + err.Error()}
		}
		detail += fmt.Sprintf(", body %s", abbrev(data))
		opts := metav1.PatchOptions{FieldManager: mgr, DryRun: dry}
		if s.verb == "apply" {
			opts.Force = ptr.To(s.force)
		}
		out, err = ri.Patch(ctx, s.target, pt, data, opts, subs...)
	case "delete":
		err = ri.Delete(ctx, s.target, deleteOptions(s.del, cur, dry), subs...)
	case "deletecollection":
		err = ri.DeleteCollection(ctx, deleteOptions(s.del, nil, dry), metav1.ListOptions{LabelSelector: s.del.selector})
	default:
		return result{outcome: failed, msg: "unknown verb " + s.verb}
	}
	r := classify(err)
	r.detail = strings.TrimPrefix(detail, ", ")
	if err == nil {
		r.returned = out
	}
	return r
}

func abbrev(b []byte) string {
	if len(b) <= 160 {
		return string(b)
	}
	return fmt.Sprintf("%s... (%d bytes)", b[:120], len(b))
}

// deleteOptions renders d for the object cur (its resourceVersion and UID for the preconditions).
func deleteOptions(d deleteSpec, cur *unstructured.Unstructured, dry []string) metav1.DeleteOptions {
	o := metav1.DeleteOptions{DryRun: dry}
	if d.propagation != "" {
		o.PropagationPolicy = ptr.To(metav1.DeletionPropagation(d.propagation))
	}
	if d.orphanDependents != "" {
		o.OrphanDependents = ptr.To(d.orphanDependents == "true") //nolint:staticcheck // the deprecated field is part of the attack surface
	}
	if d.grace >= 0 {
		o.GracePeriodSeconds = ptr.To(d.grace)
	}
	if cur != nil {
		switch d.precondition {
		case "rv":
			o.Preconditions = &metav1.Preconditions{ResourceVersion: ptr.To(cur.GetResourceVersion())}
		case "stale-rv":
			o.Preconditions = &metav1.Preconditions{ResourceVersion: ptr.To("1")}
		case "uid":
			o.Preconditions = &metav1.Preconditions{UID: ptr.To(cur.GetUID())}
		case "wrong-uid":
			o.Preconditions = &metav1.Preconditions{UID: ptr.To(types.UID("00000000-0000-0000-0000-000000000000"))}
		}
	}
	return o
}

// pad runs a kPad step: a write that changes nothing but managedFields, adding fieldsV1 paths (free
// ones: finalizer values) to one entry until the object is s.count KiB below etcd's request limit.
func (w *world) pad(s step) result {
	a := w.actors[s.actor]
	ctx, cancel := context.WithTimeout(w.t.Context(), 3*stepTimeout)
	defer cancel()
	cur := w.get(ctx, s.route.parent.Resource, s.target)
	if cur == nil {
		return result{outcome: rejected, msg: "the target does not exist"}
	}
	es := managedEntries(cur)
	idx := -1
	switch s.entry {
	case "other":
		// An entry of another manager, preferably one that also owns content (data, status, a spec field
		// other than a FencedResource's leaseName): no bound on free-only entries counts it.
		best := 0
		for i, e := range es {
			if isEpochManager(e) {
				continue
			}
			if sc := ownsContent(e); sc > best {
				idx, best = i, sc
			}
		}
	case "epoch":
		for i, e := range es {
			if isEpochManager(e) {
				idx = i
				break
			}
		}
	}
	if idx < 0 {
		es = append(es, map[string]any{"manager": "padder", "operation": "Update", "apiVersion": cur.GetAPIVersion(),
			"fieldsType": "FieldsV1", "fieldsV1": map[string]any{}})
		idx = len(es) - 1
	}
	before := len(js(cur.Object))
	need := etcdLimit - s.count*1024 - 2048 - before
	fields, _ := es[idx]["fieldsV1"].(map[string]any)
	if fields == nil {
		fields = map[string]any{}
		es[idx]["fieldsV1"] = fields
	}
	md, _ := fields["f:metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		fields["f:metadata"] = md
	}
	fin, _ := md["f:finalizers"].(map[string]any)
	if fin == nil {
		fin = map[string]any{".": map[string]any{}}
		md["f:finalizers"] = fin
	}
	added, paths := 0, 0
	for i := 0; added < need || paths < 8; i++ {
		k := fmt.Sprintf(`v:"example.com/pad-%d-%06d"`, s.n, i)
		fin[k] = map[string]any{}
		added += len(js(k)) + 4
		paths++
	}
	who, _ := es[idx]["manager"].(string)
	detail := fmt.Sprintf("%d paths (%d KiB) added to the entry of %q; object %d KiB before", paths, added/1024, who, before/1024)
	setManagedEntries(cur, es)
	mgr := fieldManager(s.manager, 0)
	var (
		data []byte
		err  error
		pt   types.PatchType
	)
	ri := a.dyn.Resource(gvrOf(s.route.parent.Resource)).Namespace(w.ns)
	switch s.verb {
	case "update":
		_, err = ri.Update(ctx, cur, metav1.UpdateOptions{FieldManager: mgr})
	default:
		data, err = json.Marshal(map[string]any{"metadata": map[string]any{"managedFields": es}})
		pt = types.MergePatchType
		if s.verb == "json" {
			data, err = json.Marshal([]jsonPatchOp{{Op: "replace", Path: "/metadata/managedFields", Value: es}})
			pt = types.JSONPatchType
		}
		if err == nil {
			_, err = ri.Patch(ctx, s.target, pt, data, metav1.PatchOptions{FieldManager: mgr})
		}
	}
	r := classify(err)
	r.detail = detail
	if err == nil {
		if after := w.get(ctx, s.route.parent.Resource, s.target); after != nil {
			r.detail += fmt.Sprintf(", %d KiB after", len(js(after.Object))/1024)
		}
	}
	return r
}

// ownsContent scores a managedFields entry: 2 if it owns data, status or a spec field other than
// leaseName, 1 otherwise.
func ownsContent(e map[string]any) int {
	fields, _ := e["fieldsV1"].(map[string]any)
	if fields["f:data"] != nil || fields["f:status"] != nil || fields["f:binaryData"] != nil {
		return 2
	}
	spec, _ := fields["f:spec"].(map[string]any)
	for k := range spec {
		if k != "f:leaseName" && k != "." {
			return 2
		}
	}
	return 1
}

// declare runs a kDeclare step: s.count FencedResources bound to the holder's Lease, 8 at a time.
func (w *world) declare(s step) result {
	a := w.actors[s.actor]
	ctx := w.t.Context()
	var ok, n atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				fr := freshObject("FencedResource", w.ns, fmt.Sprintf("decl-%d-%04d", s.n, i))
				fr.SetLabels(map[string]string{declaredLabel: "true"})
				rctx, cancel := context.WithTimeout(ctx, stepTimeout)
				_, err := a.dyn.Resource(gvrFencedResources).Namespace(w.ns).Create(rctx, fr, metav1.CreateOptions{})
				cancel()
				n.Add(1)
				if err == nil {
					ok.Add(1)
				} else {
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	for i := range s.count {
		next <- i
	}
	close(next)
	wg.Wait()
	r := result{outcome: admitted, n: int(n.Load()), nAdmitted: int(ok.Load())}
	if r.nAdmitted < r.n {
		r.outcome = rejected
		r.msg, _ = firstErr.Load().(string)
	}
	bound, _ := w.boundCount()
	r.detail = fmt.Sprintf("%d FencedResources bound to the Lease now", bound)
	return r
}
