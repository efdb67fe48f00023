package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/internal/seal"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// FenceObjectsOnAcquire returns an elector.Config.PostAcquire fence that does for the objects declared by
// FencingPolicies what FenceOnAcquire does for FencedResources, declared on the Lease as
// protocol.Fences{Objects: true}: before the elector hands leadership to user code, it raises the epoch record (annotation fencing.fencekit.io/epoch) of every object that a
// FencingPolicy bound to the acquired Lease declares, with one merge patch each that presents the new token.
// From then on a write by an earlier holder is refused by the per-object rule (new == presented >= stored),
// even one whose Lease read came before the acquisition and whose commit comes after it: the apiserver
// re-runs admission when its compare-and-swap loses to the raise.
//
// reader lists the policies and the objects straight from the apiserver (mgr.GetAPIReader(): a cache could
// miss an object created a moment ago); c writes (a plain client: the elector has not handed out the token
// yet) and resolves resources with its RESTMapper. The hook needs list on fencingpolicies and on the
// declared resources. Raising N objects takes 1 + M + N requests (M declared resources, each listed once
// whatever selectors the policies give it); see raiseObject
// for the record it finds. Every object a holder wrote is raised (raiseAll): what a user without the token
// may add to one is bounded (admission.MaxFreePartBytes), so their number, the holder's own, sets the time.
// The others take at most half of the time left, and those left are reported and raised by the holder's
// first write to each (raiseInTime). A failed raise fails the acquisition: no user without the token can
// make one fail, because what such a user may write is bounded (internal/operator/admission).
func FenceObjectsOnAcquire(c client.Client, reader client.Reader) elector.AcquireFence {
	return elector.DeclaredFence(seal.Key{}, func(ctx context.Context, token elector.Token) error {
		var policies fencingv1alpha1.FencingPolicyList
		if err := reader.List(ctx, &policies, client.InNamespace(token.Lease.Namespace)); err != nil {
			return fmt.Errorf("listing the FencingPolicies of namespace %s: %w", token.Lease.Namespace, err)
		}
		// Each object once, and each resource's List once, however many policies of the Lease name it and
		// however their selectors are written: what a policy's author adds may not multiply the
		// acquisition's work.
		var entries resourceEntries
		for _, p := range policies.Items {
			if p.Spec.LeaseName != token.Lease.Name {
				continue
			}
			for _, e := range p.Spec.Resources {
				if err := entries.add(e); err != nil {
					return fmt.Errorf("FencingPolicy %s: %w", p.Name, err)
				}
			}
		}
		var objects []*unstructured.Unstructured
		for _, r := range entries {
			found, err := declared(ctx, c, reader, token.Lease.Namespace, r)
			if err != nil {
				return fmt.Errorf("listing the %s that FencingPolicies bound to lease %s declare: %w", r.resource, token.Lease, err)
			}
			objects = append(objects, found...)
		}
		// The objects a holder wrote (HolderWrote), all of them: the webhook's copy of the Lease may admit a
		// write at the epoch such an object records, and only the raise orders it. The others within the
		// budget: the copy decides no write to them.
		written, others := splitWritten(objects)
		if err := raiseAll(ctx, len(written), func(ctx context.Context, i int) error { return raiseObject(ctx, c, written[i], token) }); err != nil {
			return fmt.Errorf("fencing %d objects written under lease %s at epoch %d: %w", len(written), token.Lease, token.Epoch, err)
		}
		budget, cancel := budgeted(ctx)
		defer cancel()
		if err := raiseInTime(ctx, budget, c, token, "object", len(others), func(ctx context.Context, i int) error { return raiseObject(ctx, c, others[i], token) }); err != nil {
			return fmt.Errorf("fencing %d objects declared for lease %s at epoch %d: %w", len(others), token.Lease, token.Epoch, err)
		}
		return ctx.Err()
	}, protocol.Fences{Objects: true})
}

// FenceObjectsOnAcquireForConfig returns FenceObjectsOnAcquire's fence with one client of its own for both
// reads and writes (uncached, with its own RESTMapper), built from a copy of cfg without client-side rate
// limiting, as FenceOnAcquireForConfig does: for a controller-runtime manager, pass mgr.GetConfig().
func FenceObjectsOnAcquireForConfig(cfg *rest.Config) (elector.AcquireFence, error) {
	c, err := fenceClient(cfg)
	if err != nil {
		return elector.AcquireFence{}, err
	}
	return FenceObjectsOnAcquire(c, c), nil
}

// resourceEntries are the policy entries of one Lease, by resource: each resource is listed once.
type resourceEntries []*resourceEntry

// resourceEntry is one resource the policies declare and the selectors they declare it with, each once
// (by its canonical form); every object of the resource when one entry has no selector.
type resourceEntry struct {
	resource   schema.GroupResource
	everything bool
	selectors  map[string]labels.Selector
}

// add records policy entry e.
func (rs *resourceEntries) add(e fencingv1alpha1.FencedObjects) error {
	gr := schema.GroupResource{Group: e.Group, Resource: e.Resource}
	i := slices.IndexFunc(*rs, func(x *resourceEntry) bool { return x.resource == gr })
	if i < 0 {
		*rs = append(*rs, &resourceEntry{resource: gr, selectors: map[string]labels.Selector{}})
		i = len(*rs) - 1
	}
	r := (*rs)[i]
	if e.Selector == nil {
		r.everything = true
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(e.Selector)
	if err != nil {
		return fmt.Errorf("the selector of %s: %w", gr, err)
	}
	r.selectors[sel.String()] = sel
	return nil
}

// listSelector is the selector r's one List sends: every object when one entry has no selector or the
// entries have several (matches then picks), the one selector otherwise.
func (r *resourceEntry) listSelector() labels.Selector {
	if !r.everything && len(r.selectors) == 1 {
		for _, sel := range r.selectors {
			return sel
		}
	}
	return labels.Everything()
}

// matches reports whether an object with labels ls is one that r declares.
func (r *resourceEntry) matches(ls labels.Set) bool {
	if r.everything {
		return true
	}
	for _, sel := range r.selectors {
		if sel.Matches(ls) {
			return true
		}
	}
	return false
}

// declared lists the objects of namespace that r declares, with one List of their metadata only: the
// raise reads and writes nothing else, and what a user without the token may put in an object's body
// (data of up to the apiserver's limit, in objects no policy selects) is never sent.
func declared(ctx context.Context, c client.Client, reader client.Reader, namespace string, r *resourceEntry) ([]*unstructured.Unstructured, error) {
	gvk, err := c.RESTMapper().KindFor(r.resource.WithVersion(""))
	if err != nil {
		return nil, err
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.InNamespace(namespace)}
	if sel := r.listSelector(); !sel.Empty() {
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	if err := reader.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		m := &list.Items[i]
		if fencingv1alpha1.ClusterOwned(r.resource.Group, r.resource.Resource, m.GetName()) || !r.matches(labels.Set(m.GetLabels())) {
			continue // no policy covers it: the webhook admits every write of it
		}
		u, err := metadataObject(&m.ObjectMeta, gvk)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// raiseObject commits a write of the new token's epoch record to u. It commits one, because that write is
// what orders a stale write whose admission came before the acquisition: the apiserver's compare-and-swap
// makes that write lose to the raise and runs its admission again, against the raised object and the new
// Lease. A record below the new epoch (or none) is raised. A record at or above it was not written by a
// holder of this Lease (the new holder has no token yet; nothing above it was issued): anyone could write
// it before a policy covered the object, so it is replaced, and one equal to the new epoch is first
// removed, since a patch that changes nothing commits nothing.
//
// Where earlier raises left entries that own nothing but the record (spentEntries), the raise removes them
// in the same write, so that it adds no Update entry; if the object's entries moved meanwhile, it reads
// them again, up to maxDropTries times. Only where the raise's own entry cannot make an object no holder
// wrote count as written (raiseWouldWrite) does it then raise without; otherwise it leaves the object
// (errLeft), as a raise cut by the budget: no holder wrote it, so the webhook decides its writes on a
// quorum read of the Lease, and the holder's first write to it raises it.
func raiseObject(ctx context.Context, c client.Client, u *unstructured.Unstructured, token elector.Token) error {
	epoch := strconv.FormatInt(token.Epoch, 10)
	if u.GetAnnotations()[fencingv1alpha1.ObjectEpochAnnotation] == epoch {
		if err := patchRecord(ctx, c, u, token, nil); err != nil {
			return ignoreNotFound(err)
		}
		if !HolderWrote(u) && raiseWouldWrite(u) {
			return errLeft // the removal took the record and the marks, and added no entry
		}
		return ignoreNotFound(patchRecord(ctx, c, u, token, epoch))
	}
	for try := 1; ; try++ {
		spent := spentEntries(u, token)
		if len(spent) == 0 {
			break
		}
		err := patchRecordDropping(ctx, c, u, token, epoch, spent)
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if try == maxDropTries || ctx.Err() != nil {
			break
		}
		fresh, err := readMetadata(ctx, c, u)
		if err != nil {
			return ignoreNotFound(err)
		}
		u = fresh
	}
	if !HolderWrote(u) && raiseWouldWrite(u) {
		return leave(ctx, c, u, token)
	}
	return ignoreNotFound(patchRecord(ctx, c, u, token, epoch))
}

// leave leaves u unraised (errLeft), but first removes a deletion marker or a hold it carries, which the
// Lease may never have issued (anyone could write one before a policy covered u): once the Lease reaches
// its epoch it would let a stale replica's DELETE through (decideDelete) or hold back free writes. A merge
// patch that only removes annotations gives its token's field manager nothing to own, so it adds no
// managedFields entry and sets off no merge.
func leave(ctx context.Context, c client.Client, u *unstructured.Unstructured, token elector.Token) error {
	annotations := u.GetAnnotations()
	_, marker := annotations[fencingv1alpha1.DeleteAtEpochAnnotation]
	_, hold := annotations[fencingv1alpha1.HoldAtEpochAnnotation]
	if marker || hold {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			fencingv1alpha1.DeleteAtEpochAnnotation: nil, fencingv1alpha1.HoldAtEpochAnnotation: nil}}})
		if err != nil {
			return err
		}
		if err := c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(token.FieldManager())); err != nil {
			if apierrors.IsNotFound(err) || ctx.Err() != nil {
				return ignoreNotFound(err)
			}
			// Left with its marks: failing the acquisition would not protect the object (the elector
			// releases, and with no holder anyone may delete it), and nothing a user without the token
			// wrote may make the fence fail.
			klog.FromContext(ctx).Info("Fence-on-acquire could not remove a marker or hold from an object it leaves",
				"lease", token.Lease.String(), "epoch", token.Epoch, "object", klog.KObj(u), "err", err)
		}
	}
	return errLeft
}

// maxDropTries is how many times a raise tries to remove spent entries (spentEntries) while the object's
// entries move under it.
const maxDropTries = 5

// errLeft is a raise that left its object: raiseWithin counts it as left, not as an error.
var errLeft = errors.New("the raise left the object: its own managedFields entry would have made it count as written")

// readMetadata reads u's metadata again, as declared lists it.
func readMetadata(ctx context.Context, c client.Client, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(u.GroupVersionKind())
	if err := c.Get(ctx, client.ObjectKeyFromObject(u), m); err != nil {
		return nil, err
	}
	return metadataObject(&m.ObjectMeta, u.GroupVersionKind())
}

// metadataObject is an object of kind gvk holding meta alone.
func metadataObject(meta *metav1.ObjectMeta, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	md, err := runtime.DefaultUnstructuredConverter.ToUnstructured(meta)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s %s/%s: %w", gvk.Kind, meta.Namespace, meta.Name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": md}}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// spentEntries returns the JSON patch operations that remove from u's managedFields the Update entries of
// earlier tokens that own nothing but fencekit's record keys and the maps that hold them: a first raise's
// entry keeps the annotations map it created once the next raise has taken its key. Left there, each adds
// to the apiserver's count of Update entries, and on an object whose count reaches ten the raise's own entry
// sets off the merge of the oldest into ancient-changes, which makes content written before coverage count
// as the holder's (HolderWrote). Each removal first tests the whole entry at its index, as it was read.
//
// It returns none unless the raise's own entry would pass the apiserver's cap: below it nothing is merged,
// and a request that leaves managedFields empty makes the apiserver stop tracking the object's fields.
func spentEntries(u *unstructured.Unstructured, token elector.Token) []map[string]any {
	entries := u.GetManagedFields()
	updates := 0
	for _, e := range entries {
		if e.Operation == metav1.ManagedFieldsOperationUpdate {
			updates++
		}
	}
	if updates+1 <= MaxUpdateEntries {
		return nil
	}
	listed, _, _ := unstructured.NestedSlice(u.Object, "metadata", "managedFields")
	var ops []map[string]any
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if e.Operation != metav1.ManagedFieldsOperationUpdate || e.Manager == token.FieldManager() ||
			!strings.HasPrefix(e.Manager, protocol.FieldManagerPrefix) || e.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields); err != nil || ownsContent(fields, 0) {
			continue
		}
		if i >= len(listed) {
			return nil
		}
		// The whole entry, not its manager alone: the apiserver keeps an entry per manager, apiVersion and
		// subresource, so the entry next to a spent one may be the same token's (its write through another
		// version, or a scale), and a write that shifts the indexes between the read and this patch would
		// otherwise have the raise remove that one (TestRound19ShiftedSpentEntryRemovesTheHoldersOtherVersionEntry).
		at := fmt.Sprintf("/metadata/managedFields/%d", i)
		ops = append(ops,
			map[string]any{"op": "test", "path": at, "value": listed[i]},
			map[string]any{"op": "remove", "path": at})
	}
	return ops
}

// patchRecordDropping is patchRecord's write of epoch with the removals spent (spentEntries), in one JSON
// patch presenting token: the raise's entry replaces the spent ones, and the count stays. The patch fails if
// the entries or the annotations moved meanwhile.
func patchRecordDropping(ctx context.Context, c client.Client, u *unstructured.Unstructured, token elector.Token, epoch string, spent []map[string]any) error {
	ops := spent
	annotations := u.GetAnnotations()
	if annotations == nil {
		ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]any{fencingv1alpha1.ObjectEpochAnnotation: epoch}})
	} else {
		ops = append(ops, map[string]any{"op": "add", "path": annotationPath(fencingv1alpha1.ObjectEpochAnnotation), "value": epoch})
		for _, k := range []string{fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation} {
			if _, ok := annotations[k]; ok {
				ops = append(ops, map[string]any{"op": "remove", "path": annotationPath(k)})
			}
		}
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(u.GroupVersionKind())
	obj.SetNamespace(u.GetNamespace())
	obj.SetName(u.GetName())
	return c.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(token.FieldManager()))
}

// annotationPath is the JSON pointer of annotation key.
func annotationPath(key string) string {
	return "/metadata/annotations/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// patchRecord sets u's epoch record to value (nil removes it), and removes any deletion marker (one the
// Lease never issued may have been written before a policy covered u) and any hold of an earlier term,
// with one merge patch that presents token.
func patchRecord(ctx context.Context, c client.Client, u *unstructured.Unstructured, token elector.Token, value any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		fencingv1alpha1.ObjectEpochAnnotation: value, fencingv1alpha1.DeleteAtEpochAnnotation: nil, fencingv1alpha1.HoldAtEpochAnnotation: nil}}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(token.FieldManager()))
}

// splitWritten separates the objects a holder wrote (HolderWrote: a token's entry owns content) from the
// others: an epoch record alone, which a raise within the budget writes and anyone could write before a
// policy covered the object, does not make an object written.
func splitWritten(objects []*unstructured.Unstructured) (written, others []*unstructured.Unstructured) {
	for _, u := range objects {
		if HolderWrote(u) {
			written = append(written, u)
		} else {
			others = append(others, u)
		}
	}
	return written, others
}

// ignoreNotFound treats an object deleted meanwhile as fenced: nothing is left to write.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
