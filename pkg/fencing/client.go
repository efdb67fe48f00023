package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// ErrNoToken is returned, without sending anything, by a write of NewClient's client while the token
// function reports no leadership (the zero Token): the safe-work deadline passed or leadership ended.
var ErrNoToken = errors.New("fencing: no fencing token (not the leader): the write was not sent")

// IsNoToken reports whether err is a write that NewClient's client refused to send for lack of a token.
func IsNoToken(err error) bool { return errors.Is(err, ErrNoToken) }

// TokenFunc returns the current fencing token, or the zero Token when this process must not write
// (elector.Elector.Token is one).
type TokenFunc func() elector.Token

// NewClient returns a client.Client that fences every write of c for objects declared by a FencingPolicy
// (and any other object: the stamp is harmless where nothing checks it). Reads go to c unchanged. Each
// write asks token for the current token and, if it is the zero Token, fails with ErrNoToken without
// sending; otherwise:
//
//   - Create, Update, Patch and Apply send the token as the request's field manager
//     (fencing.fencekit.io/epoch=N, replacing any field owner the caller gave) and set the object's epoch
//     record (annotation fencing.fencekit.io/epoch=N) in what they send: Patch adds it to a JSON merge or
//     strategic merge patch; Apply, and Patch with an apply patch (client.Apply), force ownership (a new
//     epoch is a new field manager, so without force every apply would conflict with the fields the
//     previous epoch's manager applied). A JSON patch (RFC 6902) cannot be stamped without knowing the
//     stored annotations and is refused;
//   - the status and other subresource writers send the token the same way;
//   - Delete first writes the deletion marker (annotation fencing.fencekit.io/delete-at-epoch=N) with the
//     token, then deletes with that write's resourceVersion and UID as preconditions, as Writer.Delete
//     does; DeleteAllOf is refused (no marker can be written on objects it has not read).
//
// A write that names the resourceVersion it read and loses that compare-and-swap (a conflict) first sets
// the holder's hold (see holdOnConflict). A dry run (client.DryRunAll) stores nothing: no hold, and a
// dry-run Delete sends its marker write as a dry run too.
//
// The apiserver decides: a stale token is refused there (IsStale), never retried with another epoch.
func NewClient(c client.Client, token TokenFunc) client.Client {
	return &fencedClient{Client: c, token: token}
}

type fencedClient struct {
	client.Client
	token TokenFunc
}

var _ client.Client = (*fencedClient)(nil)

func (c *fencedClient) current(verb string, obj any) (elector.Token, error) {
	t := c.token()
	if t.IsZero() {
		return t, fmt.Errorf("%s %s: %w", verb, describeObj(obj), ErrNoToken)
	}
	return t, nil
}

func describeObj(obj any) string {
	if o, ok := obj.(client.Object); ok {
		return fmt.Sprintf("%T %s", o, client.ObjectKeyFromObject(o))
	}
	return fmt.Sprintf("%T", obj)
}

// stampObject sets the epoch record on obj, and removes a deletion marker left by a Delete that did not
// happen (a marker authorises one delete, so the admission rule refuses a write that keeps it) and the
// holder's hold.
func stampObject(obj client.Object, t elector.Token) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[fencingv1alpha1.ObjectEpochAnnotation] = strconv.FormatInt(t.Epoch, 10)
	delete(a, fencingv1alpha1.DeleteAtEpochAnnotation)
	delete(a, fencingv1alpha1.HoldAtEpochAnnotation) // this write is the one the hold was for
	obj.SetAnnotations(a)
}

// stamp checks that the token is current for verb, sets its epoch record on obj and returns the token as
// the field owner the write presents.
func (c *fencedClient) stamp(verb string, obj client.Object) (client.FieldOwner, error) {
	t, err := c.current(verb, obj)
	if err != nil {
		return "", err
	}
	stampObject(obj, t)
	return client.FieldOwner(t.FieldManager()), nil
}

func (c *fencedClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	owner, err := c.stamp("creating", obj)
	if err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, append(opts, owner)...)
}

// Update writes obj with the token. If it carries a resourceVersion and loses to another write (a
// conflict), the object is held for the holder first (hold) and the conflict returned: read again and
// retry (retry.RetryOnConflict), and writes without the token cannot come between. A dry run holds
// nothing.
func (c *fencedClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	held := isHeld(obj)
	cas := obj.GetResourceVersion() != ""
	dryRun := len((&client.UpdateOptions{}).ApplyOptions(opts).DryRun) > 0
	owner, err := c.stamp("updating", obj)
	if err != nil {
		return err
	}
	err = c.Client.Update(ctx, obj, append(opts, owner)...)
	if held {
		return err // held already, as the object read shows: another hold would be one more write to lose to
	}
	return c.holdOnConflict(ctx, obj, armsHold(err, cas, dryRun), err)
}

// isHeld reports whether obj, as read, carries a hold.
func isHeld(obj client.Object) bool {
	_, ok := obj.GetAnnotations()[fencingv1alpha1.HoldAtEpochAnnotation]
	return ok
}

// holdOnConflict returns err; if arm (armsHold: the write lost a resourceVersion compare-and-swap), it
// first sets the hold (annotation fencing.fencekit.io/hold-at-epoch) on obj with the token, best effort:
// while the hold is the Lease's current epoch, fencekit refuses writes without the token to obj, so a loop
// of free writes (a label, a finalizer) cannot starve the holder's next read-and-write, which removes the
// hold.
func (c *fencedClient) holdOnConflict(ctx context.Context, obj client.Object, arm bool, err error) error {
	if !arm {
		return err
	}
	if t, terr := c.current("holding", obj); terr == nil {
		hold(ctx, c.Client, obj, t)
	}
	return err
}

// armsHold reports whether a write that returned err earns the holder's hold: it lost a resourceVersion
// compare-and-swap (cas: it named the resourceVersion it read, and err is a conflict), so the holder will
// read again and retry, and a free write could make that retry lose too. Not for:
//   - a dry run (dryRun): it stores nothing, and its hold would be stored for real, refusing every write
//     without the token (the cluster's controllers' included) until the holder's next write;
//   - server-side apply's field-manager conflict (409 "Apply failed with N conflicts"): no other write
//     came between, and retrying the same apply conflicts the same way, so the hold would stay armed.
func armsHold(err error, cas, dryRun bool) bool {
	return cas && !dryRun && apierrors.IsConflict(err) &&
		!apierrors.HasStatusCause(err, metav1.CauseTypeFieldManagerConflict)
}

// namesResourceVersion reports whether a patch of type pt with data names a resourceVersion for the
// apiserver to check, making it a compare-and-swap: metadata.resourceVersion in a JSON merge or strategic
// merge patch (client.MergeFromWithOptimisticLock), an add or replace of /metadata/resourceVersion in a
// JSON patch. An apply patch never counts: its conflicts are field managers' (armsHold).
func namesResourceVersion(pt types.PatchType, data []byte) bool {
	switch pt {
	case types.MergePatchType, types.StrategicMergePatchType:
		var p struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		return json.Unmarshal(data, &p) == nil && p.Metadata.ResourceVersion != ""
	case types.JSONPatchType:
		var ops []struct{ Op, Path string }
		if json.Unmarshal(data, &ops) != nil {
			return false
		}
		for _, op := range ops {
			if (op.Op == "add" || op.Op == "replace") && op.Path == "/metadata/resourceVersion" {
				return true
			}
		}
	case types.ApplyPatchType, types.ApplyCBORPatchType:
	}
	return false
}

// isApplyPatch reports whether pt is a server-side apply patch, whose field manager owns what it sets.
func isApplyPatch(pt types.PatchType) bool {
	return pt == types.ApplyPatchType || pt == types.ApplyCBORPatchType
}

// hold sets the holder's hold on obj with token t's epoch (see fencingv1alpha1.HoldAtEpochAnnotation), as a
// merge patch without a resourceVersion that presents t: it cannot conflict, and a stale token is refused.
// Like every fenced write it carries the epoch it presents: a FencedResource's spec.epoch and writer, an
// object's epoch record.
func hold(ctx context.Context, c client.Client, obj client.Object, t elector.Token) {
	epoch := strconv.FormatInt(t.Epoch, 10)
	patch := epochPatch(t, map[string]any{fencingv1alpha1.HoldAtEpochAnnotation: epoch})
	if !isFencedResource(obj) {
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			fencingv1alpha1.HoldAtEpochAnnotation: epoch, fencingv1alpha1.ObjectEpochAnnotation: epoch}}})
		if err != nil {
			return
		}
		patch = client.RawPatch(types.MergePatchType, raw)
	}
	if target, ok := obj.DeepCopyObject().(client.Object); ok {
		_ = c.Patch(ctx, target, patch, client.FieldOwner(t.FieldManager()))
	}
}

func isFencedResource(obj client.Object) bool {
	if _, ok := obj.(*fencingv1alpha1.FencedResource); ok {
		return true
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	return gvk.Group == fencingv1alpha1.GroupVersion.Group && gvk.Kind == "FencedResource"
}

// Patch sends patch with the token, stamped with the epoch record. An apply patch forces ownership, as
// Apply does: the token's field manager is new at each epoch, and the fields it applies are the holder's.
// A patch that names a resourceVersion and loses that compare-and-swap holds the object first, as Update
// does; an apply patch or a dry run never holds it (armsHold).
func (c *fencedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	t, err := c.current("patching", obj)
	if err != nil {
		return err
	}
	p, err := stampPatch(patch, t)
	if err != nil {
		return fmt.Errorf("patching %s: %w", describeObj(obj), err)
	}
	stampObject(obj, t) // for an apply patch, whose data is the object itself
	data, err := p.Data(obj)
	if err != nil {
		return fmt.Errorf("patching %s: encoding the %s patch: %w", describeObj(obj), p.Type(), err)
	}
	opts = append(opts, client.FieldOwner(t.FieldManager()))
	if isApplyPatch(p.Type()) {
		opts = append(opts, client.ForceOwnership)
	}
	dryRun := len((&client.PatchOptions{}).ApplyOptions(opts).DryRun) > 0
	err = c.Client.Patch(ctx, obj, client.RawPatch(p.Type(), data), opts...)
	return c.holdOnConflict(ctx, obj, armsHold(err, namesResourceVersion(p.Type(), data), dryRun), err)
}

func (c *fencedClient) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	t, err := c.current("applying", ac)
	if err != nil {
		return err
	}
	u, err := applyConfigurationToUnstructured(ac, t)
	if err != nil {
		return err
	}
	return c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
		append(opts, client.FieldOwner(t.FieldManager()), client.ForceOwnership)...)
}

// applyConfigurationToUnstructured renders ac with the epoch record set.
func applyConfigurationToUnstructured(ac runtime.ApplyConfiguration, t elector.Token) (*unstructured.Unstructured, error) {
	raw, err := json.Marshal(ac)
	if err != nil {
		return nil, fmt.Errorf("encoding the apply configuration %T: %w", ac, err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("decoding the apply configuration %T: %w", ac, err)
	}
	stampObject(u, t)
	return u, nil
}

// Delete writes the deletion marker with the token, then deletes obj with that write's resourceVersion
// and UID as preconditions; if the DELETE fails, it removes the marker (disarm).
//
// A dry run (client.DryRunAll) sends the marker write as a dry run too, then the DELETE as a dry run, and
// removes nothing: it stores nothing, yet asks the apiserver about both steps. The alternatives are not
// sound: a marker written for real arms it (every write without the token is refused) for a DELETE that
// never comes, and a dry run that skipped the DELETE would report success for a delete nothing checked
// (RBAC, preconditions, the admission rule). The price: the DELETE's admission reads the stored object,
// which a dry run leaves without the marker, so under a live Lease the dry-run delete of an object a
// policy covers is refused for the missing marker (IsTokenMissing) where the real one would be admitted.
// A dry run's refusal may thus be spurious; its success is not.
func (c *fencedClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	t, err := c.current("deleting", obj)
	if err != nil {
		return err
	}
	epoch := strconv.FormatInt(t.Epoch, 10)
	marker, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		fencingv1alpha1.ObjectEpochAnnotation:   epoch,
		fencingv1alpha1.DeleteAtEpochAnnotation: epoch,
	}}})
	if err != nil {
		return err
	}
	markerOpts := []client.PatchOption{client.FieldOwner(t.FieldManager())}
	dryRun := len((&client.DeleteOptions{}).ApplyOptions(opts).DryRun) > 0
	if dryRun {
		markerOpts = append(markerOpts, client.DryRunAll)
	}
	// A write that lands between the marker and the DELETE (a free one: another user's finalizer) makes the
	// precondition fail with a conflict: write the marker again and retry, as Writer.Delete does, until the
	// context ends (DefaultWriteTimeout if it has no deadline).
	bctx, cancel := bounded(ctx)
	defer cancel()
	err = retryConflicts(bctx, func() error {
		if err := c.Client.Patch(bctx, obj, client.RawPatch(types.MergePatchType, marker), markerOpts...); err != nil {
			return err
		}
		rv, uid := obj.GetResourceVersion(), obj.GetUID()
		return c.Client.Delete(bctx, obj, append(opts, client.Preconditions{ResourceVersion: &rv, UID: &uid})...)
	}, nil)
	switch {
	case err == nil || apierrors.IsNotFound(err):
	case dryRun:
		if IsTokenMissing(err) {
			return fmt.Errorf("deleting %s at epoch %d as a dry run: the DELETE is decided on the stored deletion marker %s, which a dry run does not write: %w",
				describeObj(obj), t.Epoch, fencingv1alpha1.DeleteAtEpochAnnotation, err)
		}
	default:
		c.disarm(ctx, obj, t)
	}
	return err
}

// disarm removes the deletion marker of a Delete whose DELETE failed, best effort (the holder's next write
// removes it anyway): a marker authorises one delete, and while it is the Lease's current epoch every write
// without the token to obj is refused. It runs under ctx's values but not its end (cleanupContext): a
// DELETE that failed because ctx ended must not leave the marker armed.
func (c *fencedClient) disarm(ctx context.Context, obj client.Object, t elector.Token) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, fencingv1alpha1.DeleteAtEpochAnnotation)
	_ = c.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner(t.FieldManager()))
}

func (c *fencedClient) DeleteAllOf(_ context.Context, obj client.Object, _ ...client.DeleteAllOfOption) error {
	return fmt.Errorf("deleting all of %T: a fenced client deletes objects one by one (each needs its deletion marker)", obj)
}

func (c *fencedClient) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c *fencedClient) SubResource(name string) client.SubResourceClient {
	return &fencedSubResource{SubResourceClient: c.Client.SubResource(name), name: name, parent: c.Client, token: c.token}
}

type fencedSubResource struct {
	client.SubResourceClient
	name   string
	parent client.Client // the object's client, for the hold
	token  TokenFunc
}

// notDeleting refuses a scale write to an object being deleted: it would go with the object once its
// finalizers are removed (anyone may remove most), and the apiserver's rule cannot see the deletion
// through a Scale, which carries none of the object's metadata. Other writes to such an object are
// refused by the rule itself. It returns the resourceVersion it read ("" for another subresource): the
// write names it as its precondition (preconditioned), so a read from a cache that has not yet seen the
// deletion makes the write fail with a conflict rather than go through.
func (s *fencedSubResource) notDeleting(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey, t elector.Token) (string, error) {
	if s.name != "scale" {
		return "", nil
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(gvk)
	if err := s.parent.Get(ctx, key, m); err != nil {
		return "", err
	}
	if m.DeletionTimestamp == nil {
		return m.ResourceVersion, nil
	}
	name := m.Namespace + "/" + m.Name
	return "", errorf(protocol.ReasonInvalid, name, t.Lease.Name, t.Epoch, 0,
		"%s %s is being deleted (deletionTimestamp %s, finalizers %q): a scale write would go with it once its finalizers are removed; wait until it is gone, then create it again",
		gvk.Kind, name, m.DeletionTimestamp.UTC().Format(time.RFC3339), m.Finalizers)
}

// objectGVK is obj's kind, as the parent client's scheme knows it.
func (s *fencedSubResource) objectGVK(obj client.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, s.parent.Scheme())
}

// precondition sets rv as the resourceVersion the write is made at, in the body's metadata (a Scale's is
// its object's): a write whose caller named another one is refused as a conflict, since notDeleting's
// read, not the caller's, says the object is not being deleted.
func precondition(body metav1.Object, rv string) error {
	return preconditionOf(body, body.GetName(), rv)
}

// preconditionOf is precondition for a body that may not carry the object's name (a patch), which
// refusals name as name.
func preconditionOf(body metav1.Object, name, rv string) error {
	switch got := body.GetResourceVersion(); got {
	case "":
		body.SetResourceVersion(rv)
	case rv:
	default:
		return apierrors.NewConflict(schema.GroupResource{Resource: "scale"}, name,
			fmt.Errorf("the scale names resourceVersion %s, and the object read to check it is not being deleted is at %s: read again and retry", got, rv))
	}
	return nil
}

// preconditioned is a patch that names resourceVersion rv as its precondition: in the object it patches,
// for a JSON merge, strategic merge or apply patch, and by replacing it, for a JSON patch (RFC 6902),
// which the apiserver then applies only to the object at rv.
type preconditioned struct {
	client.Patch
	rv string
}

func (p preconditioned) Data(obj client.Object) ([]byte, error) {
	data, err := p.Patch.Data(obj)
	if err != nil {
		return nil, err
	}
	if p.Type() == types.JSONPatchType {
		var ops []any
		if err := json.Unmarshal(data, &ops); err != nil {
			return nil, fmt.Errorf("reading the JSON patch: %w", err)
		}
		return json.Marshal(append(ops, map[string]any{"op": "replace", "path": "/metadata/resourceVersion", "value": p.rv}))
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		return nil, fmt.Errorf("reading the %s patch: %w", p.Type(), err)
	}
	if err := preconditionOf(u, obj.GetName(), p.rv); err != nil {
		return nil, err
	}
	return json.Marshal(u.Object)
}

func (s *fencedSubResource) holdOnConflict(ctx context.Context, obj client.Object, arm bool, err error) error {
	return (&fencedClient{Client: s.parent, token: s.token}).holdOnConflict(ctx, obj, arm, err)
}

func (s *fencedSubResource) current(verb string, obj any) (elector.Token, error) {
	return (&fencedClient{token: s.token}).current(verb, obj)
}

// write checks that the token is current for verb, then runs do with the token as the field owner.
func (s *fencedSubResource) write(verb string, obj any, do func(t elector.Token, owner client.FieldOwner) error) error {
	t, err := s.current(verb, obj)
	if err != nil {
		return err
	}
	return do(t, client.FieldOwner(t.FieldManager()))
}

func (s *fencedSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return s.write("creating a subresource of", obj, func(_ elector.Token, owner client.FieldOwner) error {
		return s.SubResourceClient.Create(ctx, obj, sub, append(opts, owner)...)
	})
}

func (s *fencedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return s.write("updating a subresource of", obj, func(t elector.Token, owner client.FieldOwner) error {
		gvk, err := s.objectGVK(obj)
		if err != nil {
			return err
		}
		rv, err := s.notDeleting(ctx, gvk, client.ObjectKeyFromObject(obj), t)
		if err != nil {
			return err
		}
		o := (&client.SubResourceUpdateOptions{}).ApplyOptions(opts)
		body := o.SubResourceBody
		if body == nil {
			body = obj
		}
		dryRun := len(o.DryRun) > 0
		if rv != "" {
			if err := precondition(body, rv); err != nil {
				// The caller's resourceVersion against the one notDeleting read: a lost compare-and-swap,
				// as in Patch.
				return s.holdOnConflict(ctx, obj, armsHold(err, true, dryRun), err)
			}
		}
		cas := body.GetResourceVersion() != ""
		err = s.SubResourceClient.Update(ctx, obj, append(opts, owner)...)
		return s.holdOnConflict(ctx, obj, armsHold(err, cas, dryRun), err)
	})
}

func (s *fencedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return s.write("patching a subresource of", obj, func(t elector.Token, owner client.FieldOwner) error {
		gvk, err := s.objectGVK(obj)
		if err != nil {
			return err
		}
		rv, err := s.notDeleting(ctx, gvk, client.ObjectKeyFromObject(obj), t)
		if err != nil {
			return err
		}
		if rv != "" {
			patch = preconditioned{Patch: patch, rv: rv}
		}
		opts = append(opts, owner)
		if isApplyPatch(patch.Type()) {
			opts = append(opts, client.ForceOwnership) // as Patch and Apply do
		}
		dryRun := len((&client.SubResourcePatchOptions{}).ApplyOptions(opts).DryRun) > 0
		data, err := patch.Data(obj)
		if err != nil {
			// A conflict here is the caller's resourceVersion against the one notDeleting read: a lost
			// compare-and-swap.
			return s.holdOnConflict(ctx, obj, armsHold(err, true, dryRun), err)
		}
		err = s.SubResourceClient.Patch(ctx, obj, client.RawPatch(patch.Type(), data), opts...)
		return s.holdOnConflict(ctx, obj, armsHold(err, namesResourceVersion(patch.Type(), data), dryRun), err)
	})
}

func (s *fencedSubResource) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return s.write("applying a subresource of", ac, func(t elector.Token, owner client.FieldOwner) error {
		if s.name == "scale" {
			body, err := s.preconditionedApply(ctx, ac, (&client.SubResourceApplyOptions{}).ApplyOpts(opts).SubResourceBody, t)
			if err != nil {
				return err
			}
			opts = append(opts, &client.SubResourceApplyOptions{SubResourceBody: body})
		}
		return s.SubResourceClient.Apply(ctx, ac, append(opts, owner, client.ForceOwnership)...)
	})
}

// preconditionedApply checks that the object of ac is not being deleted (notDeleting) and returns the
// scale to apply (body, or ac when there is none) naming the resourceVersion read as its precondition.
func (s *fencedSubResource) preconditionedApply(ctx context.Context, ac, body runtime.ApplyConfiguration, t elector.Token) (runtime.ApplyConfiguration, error) {
	object, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ac)
	if err != nil {
		return nil, fmt.Errorf("reading the apply configuration: %w", err)
	}
	o := &unstructured.Unstructured{Object: object}
	rv, err := s.notDeleting(ctx, o.GroupVersionKind(), client.ObjectKeyFromObject(o), t)
	if err != nil {
		return nil, err
	}
	if body == nil {
		body = ac
	}
	scale, err := runtime.DefaultUnstructuredConverter.ToUnstructured(body)
	if err != nil {
		return nil, fmt.Errorf("reading the scale to apply: %w", err)
	}
	u := &unstructured.Unstructured{Object: scale}
	if err := precondition(u, rv); err != nil {
		return nil, err
	}
	return client.ApplyConfigurationFromUnstructured(u), nil
}

// stampedPatch adds the epoch record to a merge patch's data, and removes a deletion marker.
type stampedPatch struct {
	client.Patch
	epoch string
}

func stampPatch(p client.Patch, t elector.Token) (client.Patch, error) {
	switch p.Type() {
	case types.MergePatchType, types.StrategicMergePatchType:
		return stampedPatch{Patch: p, epoch: strconv.FormatInt(t.Epoch, 10)}, nil
	case types.ApplyPatchType, types.ApplyCBORPatchType:
		return p, nil // its data is the object, which Patch stamps
	default:
		return nil, fmt.Errorf("a fenced client cannot stamp a %s patch with the epoch record: use a merge patch (client.MergeFrom) or Apply", p.Type())
	}
}

func (p stampedPatch) Data(obj client.Object) ([]byte, error) {
	raw, err := p.Patch.Data(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decoding the merge patch: %w", err)
	}
	if m == nil {
		m = map[string]any{}
	}
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[fencingv1alpha1.ObjectEpochAnnotation] = p.epoch
	for _, key := range []string{fencingv1alpha1.DeleteAtEpochAnnotation, fencingv1alpha1.HoldAtEpochAnnotation} {
		if _, set := ann[key]; !set {
			ann[key] = nil // a marker authorises one delete, a hold one write: see stampObject
		}
	}
	return json.Marshal(m)
}
