package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// The holder's Lease as a target. Its writers other than the holder are another elector-role user, users
// with RBAC on Leases only (an editor, a GitOps tool) and kube-controller-manager's credential; the holder's
// own user is left out, since code presenting the current epoch under the holder's credentials is the
// holder as far as the apiserver can tell (docs/design/identity.md). After each such write:
//   - I1 (the term): the holder, the epoch, the acquirer, the fences declaration, the fenced label, the
//     acquire time, the duration and the transitions are what the holder's elector wrote, and the Lease
//     is not being deleted;
//   - I2 (headroom): a write admitted without the token left the Lease within admission.MaxFreeLeaseBytes
//     (or no larger than it was), and the holder's next renewal lands.

// leaseRoute is the route of the world's Lease.
var leaseRoute = route{gvr: leaseGVR, kind: "Lease", parent: schema.GroupResource{Group: leaseGVR.Group, Resource: "leases"}, parentKind: "Lease",
	verbs: []string{"get", "update", "patch", "delete"}}

// leaseRules let the world's users write Leases, as another elector-role user may. Not delete: a user who
// may delete Leases can remove the operator's finalizer and the Lease with it, and is break glass
// (docs/design/identity.md); their DELETEs are sent anyway, and RBAC refuses them.
var leaseRules = []rbacv1.PolicyRule{{APIGroups: []string{leaseGVR.Group}, Resources: []string{"leases"},
	Verbs: []string{"get", "list", "watch", "update", "patch"}}}

// leaseStep is a random write of the holder's Lease by one of its other writers.
func (g *generator) leaseStep() step {
	s := step{kind: kLease, route: leaseRoute, target: leaseName, dryRun: g.chance(0.1), force: g.chance(0.5),
		actor: pick(g.rng, weighted[string]{5, actorOther}, weighted[string]{3, actorEditor}, weighted[string]{2, actorGitOps},
			weighted[string]{1, actorKCM})}
	s.manager = g.managerFor(s.actor)
	s.verb = pick(g.rng, weighted[string]{5, "merge"}, weighted[string]{3, "update"}, weighted[string]{2, "json"},
		weighted[string]{2, "apply"}, weighted[string]{1, "delete"})
	if s.verb == "delete" {
		s.del = g.deleteOptions()
		return s
	}
	v := fmt.Sprintf("v%d", g.rng.IntN(1000))
	s.change = pick(g.rng,
		weighted[change]{4, change{name: "lease-label", key: fmt.Sprintf("team-%d", g.rng.IntN(4)), value: v}},
		weighted[change]{2, change{name: "lease-labels-many", n: oneOf(g.rng, 40, 64, 65, 200)}},
		weighted[change]{3, change{name: "lease-annotation", key: "example.com/note", value: v}},
		weighted[change]{4, change{name: "lease-annotation-fencekit",
			key:   oneOf(g.rng, protocol.EpochAnnotation, protocol.AcquirerAnnotation, protocol.FencesAnnotation),
			value: oneOf(g.rng, "current", "stale", "future", "", "remove", "other")}},
		weighted[change]{1, change{name: "lease-fenced-label", value: oneOf(g.rng, "false", "remove")}},
		weighted[change]{3, change{name: "lease-holder", value: oneOf(g.rng, "", "other", "holder-2")}},
		weighted[change]{2, change{name: "lease-renew"}},
		weighted[change]{2, change{name: "lease-duration", value: oneOf(g.rng, "1", "3600")}},
		weighted[change]{1, change{name: "lease-transitions"}},
		weighted[change]{1, change{name: "lease-acquire-time"}},
		weighted[change]{2, change{name: "lease-finalizer", value: oneOf(g.rng, "example.com/hold", "orphan")}},
		weighted[change]{1, change{name: "lease-finalizers-clear"}},
		weighted[change]{3, change{name: "lease-managed-pad", n: oneOf(g.rng, 16, 64, 200, 300, 400)}},
	)
	return s
}

// applyLease makes change c to the Lease u; epoch is the Lease's current epoch.
func applyLease(u *unstructured.Unstructured, c change, epoch int64, other string) {
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	switch c.name {
	case "lease-label":
		setMapKey(u, []string{"metadata", "labels"}, c.key, c.value)
	case "lease-labels-many":
		ls := u.GetLabels()
		if ls == nil {
			ls = map[string]string{}
		}
		for i := range c.n {
			ls[fmt.Sprintf("example.com/pad-%03d", i)] = strings.Repeat("x", 63)
		}
		u.SetLabels(ls)
	case "lease-annotation":
		setMapKey(u, []string{"metadata", "annotations"}, c.key, c.value)
	case "lease-annotation-fencekit":
		a := u.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		switch c.value {
		case "remove":
			delete(a, c.key)
		case "current", "stale", "future":
			e := map[string]int64{"current": epoch, "stale": epoch - 1, "future": epoch + 1}[c.value]
			a[c.key] = strconv.FormatInt(max(e, 1), 10)
			if c.key == protocol.FencesAnnotation {
				a[c.key] = protocol.Fences{}.String()
			}
		case "other":
			a[c.key] = other
			if c.key == protocol.FencesAnnotation {
				a[c.key] = "objects"
			}
		default:
			a[c.key] = c.value
		}
		u.SetAnnotations(a)
	case "lease-fenced-label":
		ls := u.GetLabels()
		if c.value == "remove" {
			delete(ls, protocol.FencedLabel)
		} else {
			ls[protocol.FencedLabel] = c.value
		}
		u.SetLabels(ls)
	case "lease-holder":
		_ = unstructured.SetNestedField(u.Object, c.value, "spec", "holderIdentity")
	case "lease-renew":
		_ = unstructured.SetNestedField(u.Object, now, "spec", "renewTime")
	case "lease-duration":
		n, _ := strconv.ParseInt(c.value, 10, 64)
		_ = unstructured.SetNestedField(u.Object, n, "spec", "leaseDurationSeconds")
	case "lease-transitions":
		n, _, _ := unstructured.NestedInt64(u.Object, "spec", "leaseTransitions")
		_ = unstructured.SetNestedField(u.Object, n+1, "spec", "leaseTransitions")
	case "lease-acquire-time":
		_ = unstructured.SetNestedField(u.Object, now, "spec", "acquireTime")
	case "lease-finalizer":
		u.SetFinalizers(append(u.GetFinalizers(), c.value))
	case "lease-finalizers-clear":
		u.SetFinalizers(nil)
	case "lease-managed-pad":
		var b strings.Builder
		b.WriteString(`{"f:metadata":{"f:annotations":{`)
		for i := 0; b.Len() < c.n*1024; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"f:example.com/pad-%07d":{}`, i)
		}
		b.WriteString(`}}}`)
		var fields map[string]any
		_ = json.Unmarshal([]byte(b.String()), &fields)
		es := managedEntries(u)
		es = append(es, map[string]any{"manager": "padder", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
			"time": now[:19] + "Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
		setManagedEntries(u, es)
	}
}

// lease reads the world's Lease as an admin (nil if it cannot).
func (w *world) lease() *unstructured.Unstructured {
	u, err := w.admin.Resource(leaseGVR).Namespace(w.ns).Get(w.t.Context(), leaseName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return u
}

// leaseTerm is what I1 holds on the Lease: the term as the holder's elector wrote it.
func leaseTerm(u *unstructured.Unstructured) string {
	if u == nil {
		return "absent"
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	a, l := u.GetAnnotations(), u.GetLabels()
	term := fmt.Sprintf("holder %v, epoch %q, acquirer %q, fences %q, fenced label %q, acquired %v, duration %v, transitions %v",
		spec["holderIdentity"], a[protocol.EpochAnnotation], a[protocol.AcquirerAnnotation], a[protocol.FencesAnnotation],
		l[protocol.FencedLabel], spec["acquireTime"], spec["leaseDurationSeconds"], spec["leaseTransitions"])
	if u.GetDeletionTimestamp() != nil {
		term += ", being deleted"
	}
	return term
}

// leaseWrite runs a kLease step.
func (w *world) leaseWrite(s step) result {
	a := w.actors[s.actor]
	ctx, cancel := context.WithTimeout(w.t.Context(), stepTimeout)
	defer cancel()
	ri := a.dyn.Resource(leaseGVR).Namespace(w.ns)
	cur, err := w.admin.Resource(leaseGVR).Namespace(w.ns).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		return result{outcome: failed, msg: "reading the Lease: " + err.Error()}
	}
	epoch, _ := protocol.ParseEpoch(cur.GetAnnotations()[protocol.EpochAnnotation])
	mgr := fieldManager(s.manager, epoch)
	var dry []string
	if s.dryRun {
		dry = []string{metav1.DryRunAll}
	}
	if s.verb == "delete" {
		return classify(ri.Delete(ctx, leaseName, deleteOptions(s.del, cur, dry)))
	}
	upd := cur.DeepCopy()
	applyLease(upd, s.change, epoch, a.user)
	if s.verb == "update" {
		_, err = ri.Update(ctx, upd, metav1.UpdateOptions{FieldManager: mgr, DryRun: dry})
		return withDetail(classify(err), mgr, nil)
	}
	data, pt, mgr, err := patchFor(s.verb, cur, upd, s.force, mgr)
	if err != nil {
		return result{outcome: failed, msg: "building the patch: " + err.Error()}
	}
	opts := metav1.PatchOptions{FieldManager: mgr, DryRun: dry}
	if s.verb == "apply" {
		opts.Force = ptr.To(s.force)
	}
	_, err = ri.Patch(ctx, leaseName, pt, data, opts)
	return withDetail(classify(err), mgr, data)
}

func withDetail(r result, mgr string, body []byte) result {
	if mgr != "" {
		r.detail = "fieldManager " + mgr
	}
	if body != nil {
		r.detail = strings.TrimPrefix(r.detail+", body "+abbrev(body), ", ")
	}
	return r
}

// checkLease holds I1 and I2 on the Lease after a kLease step: before is the Lease read just before it.
func (a *attack) checkLease(s *step, r result, before *unstructured.Unstructured) {
	w := a.w
	ctx, cancel := context.WithTimeout(w.t.Context(), stepTimeout)
	defer cancel()
	after, err := w.admin.Resource(leaseGVR).Namespace(w.ns).Get(ctx, leaseName, metav1.GetOptions{})
	if err != nil {
		after = nil
	}
	if got, want := leaseTerm(after), leaseTerm(before); got != want {
		a.violate("I1 (the Lease's term)", s, fmt.Sprintf("%s (%s): the holder's Lease is now %s, was %s", s.actor, r, got, want))
		return
	}
	if r.outcome == admitted && !s.dryRun {
		if b, n := len(js(before.Object)), len(js(after.Object)); n > b && n > admission.MaxFreeLeaseBytes {
			a.violate("I2 (headroom)", s, fmt.Sprintf("a write without the holder's token grew its Lease from %d to %d bytes, over %d", b, n, admission.MaxFreeLeaseBytes))
		}
	}
	// The holder's next renewal lands (its RetryPeriod is 2 s; a lost compare-and-swap is retried as a
	// JSON patch on the term).
	renewed := func(u *unstructured.Unstructured) string {
		t, _, _ := unstructured.NestedString(u.Object, "spec", "renewTime")
		return t
	}
	last := renewed(after)
	if err := waitUntil(ctx, func() bool {
		u, err := w.admin.Resource(leaseGVR).Namespace(w.ns).Get(ctx, leaseName, metav1.GetOptions{})
		return err == nil && renewed(u) != last && leaseTerm(u) == leaseTerm(before)
	}); err != nil {
		a.violate("I2 (headroom)", s, fmt.Sprintf("the holder's elector did not renew its Lease within %v after the step (last renewal %s)", stepTimeout, last))
	}
}
