package fencing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// retryConflicts runs write until it returns anything but a resourceVersion conflict, or ctx ends: then it
// returns the last conflict. A conflict means another write landed between the read (or the deletion
// marker) and this write: the operator's status update right after the previous write, or anyone's free
// write (a label, a finalizer) at any rate. A retry at once usually succeeds; the pause then doubles from
// 1 ms to 64 ms and stays there, so that only a caller's deadline, never a count of conflicts someone else
// can cause, ends the retries. onConflict, if set, runs after each conflict (Writer.Update holds the
// resource there).
func retryConflicts(ctx context.Context, write func() error, onConflict func()) error {
	pause := wait.Backoff{Duration: time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 7}
	for {
		err := write()
		if !apierrors.IsConflict(err) {
			return err
		}
		if onConflict != nil {
			onConflict()
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause.Step()):
		}
	}
}

// Writer performs fenced writes of FencedResources with a lease holder's Token.
type Writer struct {
	client client.Client
}

// DefaultWriteTimeout bounds a Writer call whose context has no deadline: a request on a connection that
// died while the process was paused (an apiserver restart, a NAT entry dropped) would otherwise wait for
// client-go's HTTP/2 health check (30 s + 15 s), or for ever over HTTP/1.1. The epoch check, not the
// timeout, is what keeps a late write out; the timeout only keeps the writer from hanging.
const DefaultWriteTimeout = 10 * time.Second

// bounded is ctx with DefaultWriteTimeout, unless ctx already has a deadline.
func bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultWriteTimeout)
}

// cleanupContext is the context of the write that undoes part of a failed call (a Delete's marker
// removal): ctx's values without its cancellation or deadline, since the call may have failed because ctx
// ended, bounded by DefaultWriteTimeout of its own.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), DefaultWriteTimeout)
}

// NewWriter returns a Writer that writes with c. Each call is bounded by its context's deadline, or by
// DefaultWriteTimeout when it has none. The client's user must be the one the elector acquired
// the Lease as (the same credentials): fencekit admits a write only from the acquiring user.
func NewWriter(c client.Client) *Writer { return &Writer{client: c} }

// NewWriterForConfig returns a Writer with a client of its own for cfg (as rest.InClusterConfig or
// clientcmd.BuildConfigFromFlags return it), fencekit's API registered in its scheme: what a worker needs for
// its first fenced write, with pkg/fencing alone. cfg's credentials must be those the elector acquires with,
// and its client-side rate limit (QPS, Burst) applies to the writes.
func NewWriterForConfig(cfg *rest.Config) (*Writer, error) {
	if cfg == nil {
		return nil, errors.New("building the fenced writer's client: no rest.Config given")
	}
	c, err := newClient(cfg, "the fenced writer's client")
	if err != nil {
		return nil, err
	}
	return NewWriter(c), nil
}

// Mutation changes a FencedResource's data in place. data is never nil (an empty object when the resource
// has none yet). Returning an error aborts the write.
//
// The numbers already stored arrive as json.Number (their exact decimal text), not float64: a float64
// cannot hold every integer above 2^53, and a value the mutation leaves alone is written back bit-exact.
// Use its Int64, Float64 or String methods to read one; set any JSON-encodable value.
type Mutation func(data map[string]any) error

// Update reads the FencedResource key, applies mutate to its data and writes it back carrying token: epoch
// token.Epoch and writer token.Holder, presented in the request as its field manager (token.FieldManager()). A resourceVersion conflict (another write came first) is retried
// with a fresh read, always with the same token: the epoch is never changed to get a write through, and the
// decision stays with the apiserver, which refuses the write if the resource has moved to a later epoch.
// Refusals by fencekit come back as errors that IsStale, IsNotHolder and IsLeaseMissing recognise. On
// success the written resource is returned.
func (w *Writer) Update(ctx context.Context, token elector.Token, key types.NamespacedName, mutate Mutation) (*fencingv1alpha1.FencedResource, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if token.IsZero() {
		return nil, fmt.Errorf("writing FencedResource %s: no fencing token (not the leader)", key)
	}
	var fr fencingv1alpha1.FencedResource
	held := false
	err := retryConflicts(ctx, func() error {
		if err := w.client.Get(ctx, key, &fr); err != nil {
			return err
		}
		if err := checkBinding(&fr, token); err != nil {
			return err
		}
		if err := checkNotDeleting(&fr, token); err != nil {
			return err
		}
		data := map[string]any{}
		if !emptyData(fr.Spec.Data) {
			v, err := decodeExact(fr.Spec.Data.Raw)
			m, isObject := v.(map[string]any)
			if err == nil && !isObject {
				err = fmt.Errorf("not a JSON object")
			}
			if err != nil {
				return fmt.Errorf("decoding spec.data of FencedResource %s: %w", key, err)
			}
			data = m
		}
		if err := mutate(data); err != nil {
			return err
		}
		raw, err := json.Marshal(data)
		if err != nil {
			return fmt.Errorf("encoding spec.data of FencedResource %s: %w", key, err)
		}
		stamp(&fr, token)
		fr.Spec.Data = &runtime.RawExtension{Raw: raw}
		return w.client.Update(ctx, &fr, client.FieldOwner(token.FieldManager()))
	}, func() {
		// Once: the hold is a write too, after which the operator writes the status, and a second hold
		// would only start that again.
		if !held {
			held = true
			_ = w.client.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
				epochPatch(token, map[string]any{fencingv1alpha1.HoldAtEpochAnnotation: strconv.FormatInt(token.Epoch, 10)}),
				client.FieldOwner(token.FieldManager()))
		}
	})
	if err != nil {
		countRefusal(token.Lease.String(), err)
		return nil, wrap(key, token, err)
	}
	return &fr, nil
}

// Set replaces the FencedResource's data with data, carrying token (presented in the request as its field
// manager, token.FieldManager(), as on every fenced write), with ONE request: a JSON patch (RFC 6902) that
// tests that the resource is bound to the token's Lease (spec.leaseName), replaces spec.data, sets
// spec.epoch and the writer annotation to the token's, and removes a deletion marker left by a Delete that
// did not happen. It carries no resourceVersion, so that the operator's status updates cannot make it
// conflict: whether the epoch is current is decided inside the apiserver (the CRD rule, the webhook),
// atomically with the write, and the binding test is applied to the object the write replaces. Keys whose
// value is null are left out of the stored data, at every depth. Use Update for a read-modify-write.
//
// Only when the apiserver cannot apply the patch (422) does Set read the resource: to name the Lease it is
// bound to if that is not the token's, or, for a resource that has no annotations yet (one created without
// any and not yet fenced), to write them with a second patch that tests they are still absent.
func (w *Writer) Set(ctx context.Context, token elector.Token, key types.NamespacedName, data map[string]any) (*fencingv1alpha1.FencedResource, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if token.IsZero() {
		return nil, fmt.Errorf("writing FencedResource %s: no fencing token (not the leader)", key)
	}
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	err := w.setPatch(ctx, fr, token, data)
	if apierrors.IsInvalid(err) {
		err = w.setAfterRead(ctx, fr, token, key, data, err)
	}
	if err != nil {
		countRefusal(token.Lease.String(), err)
		return nil, wrap(key, token, err)
	}
	return fr, nil
}

// setAfterRead handles a Set patch that the apiserver refused with 422 (err): the patch did not apply (the
// binding test failed, or the resource has no annotations for the writer's), or the CRD rule refused the
// write. It reads the resource and returns the binding error, or gives a resource without the writer
// annotation that annotation and sends the patch again, or returns err.
func (w *Writer) setAfterRead(ctx context.Context, fr *fencingv1alpha1.FencedResource, token elector.Token, key types.NamespacedName, data map[string]any, err error) error {
	var stored fencingv1alpha1.FencedResource
	if gerr := w.client.Get(ctx, key, &stored); gerr != nil {
		return err
	}
	if berr := checkBinding(&stored, token); berr != nil {
		return berr
	}
	if stored.Annotations[fencingv1alpha1.WriterAnnotation] != "" {
		return err // the patch's paths exist: the apiserver refused the write itself
	}
	// A declaration without the writer annotation (without annotations at all, or with only free ones a
	// moment ago: anyone may toggle one): give it the writer annotation first, with a merge patch that
	// creates the map whatever else is there (the JSON patch's add needs the map), then send the patch
	// again. The writer annotation needs the token to remove, so the map stays.
	if perr := w.client.Patch(ctx, fr, epochPatch(token, nil), client.FieldOwner(token.FieldManager())); perr != nil {
		return perr
	}
	return w.setPatch(ctx, fr, token, data)
}

// setPatch sends Set's JSON patch. withAnnotations says the resource has an annotations map; without it the
// patch tests that it has none and writes the whole map.
func (w *Writer) setPatch(ctx context.Context, fr *fencingv1alpha1.FencedResource, token elector.Token, data map[string]any) error {
	patch, err := json.Marshal(setOps(token, data))
	if err != nil {
		return fmt.Errorf("encoding the patch of FencedResource %s/%s: %w", fr.Namespace, fr.Name, err)
	}
	return w.client.Patch(ctx, fr, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(token.FieldManager()))
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// setOps are the operations of Set's patch (see Set). A JSON patch cannot remove a key that may be absent,
// so the deletion marker is first set, then removed; an "add" of a member replaces it when present.
func setOps(token elector.Token, data map[string]any) []jsonPatchOp {
	annotation := func(name string) string { return "/metadata/annotations/" + strings.ReplaceAll(name, "/", "~1") }
	ops := []jsonPatchOp{
		{Op: "test", Path: "/spec/leaseName", Value: token.Lease.Name},
		{Op: "add", Path: "/spec/epoch", Value: token.Epoch},
		{Op: "add", Path: "/spec/data", Value: withoutNulls(data)},
	}
	return append(ops,
		jsonPatchOp{Op: "add", Path: annotation(fencingv1alpha1.WriterAnnotation), Value: token.Holder},
		jsonPatchOp{Op: "add", Path: annotation(fencingv1alpha1.DeleteAtEpochAnnotation), Value: ""},
		jsonPatchOp{Op: "remove", Path: annotation(fencingv1alpha1.DeleteAtEpochAnnotation)},
		jsonPatchOp{Op: "add", Path: annotation(fencingv1alpha1.HoldAtEpochAnnotation), Value: ""},
		jsonPatchOp{Op: "remove", Path: annotation(fencingv1alpha1.HoldAtEpochAnnotation)})
}

// withoutNulls is m without its null values, at every depth of nested objects.
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

// Delete deletes the FencedResource key as the holder of token. A DELETE request cannot present a token,
// so it takes two steps: a fenced write of the deletion marker (annotation fencing.fencekit.io/delete-at-epoch
// = token.Epoch, with the token as field manager, like any fenced write), then the delete, with the
// resourceVersion and UID of that write as preconditions. While the Lease is live the apiserver admits the
// delete only from the acquiring user and only if the stored marker is the Lease's current epoch: a holder
// whose epoch has passed is refused at the marker write (stale epoch) or at the delete (stale marker). A
// conflict (another write came between the two steps: the operator's status update, anyone's label) repeats
// both, until ctx ends (DefaultWriteTimeout if it has no deadline). A resource that is
// already gone is not an error.
func (w *Writer) Delete(ctx context.Context, token elector.Token, key types.NamespacedName) error {
	ctx, cancel := bounded(ctx)
	defer cancel()
	if token.IsZero() {
		return fmt.Errorf("deleting FencedResource %s: no fencing token (not the leader)", key)
	}
	err := retryConflicts(ctx, func() error {
		var fr fencingv1alpha1.FencedResource
		if err := w.client.Get(ctx, key, &fr); err != nil {
			return err
		}
		if err := checkBinding(&fr, token); err != nil {
			return err
		}
		if fr.DeletionTimestamp != nil {
			return nil // its deletion was admitted already: it goes once its finalizers are removed
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"annotations": map[string]string{
				fencingv1alpha1.WriterAnnotation:        token.Holder,
				fencingv1alpha1.DeleteAtEpochAnnotation: strconv.FormatInt(token.Epoch, 10),
			}},
			"spec": map[string]any{"epoch": token.Epoch},
		})
		if err != nil {
			return err
		}
		if err := w.client.Patch(ctx, &fr, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(token.FieldManager())); err != nil {
			return err
		}
		return w.client.Delete(ctx, &fr, client.Preconditions{ResourceVersion: &fr.ResourceVersion, UID: &fr.UID})
	}, nil)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		w.disarm(ctx, token, key)
		countRefusal(token.Lease.String(), err)
		if fe := (*Error)(nil); errors.As(err, &fe) {
			return err
		}
		return fmt.Errorf("deleting FencedResource %s at epoch %d: %w", key, token.Epoch, err)
	}
	return nil
}

// disarm removes the deletion marker of a Delete that failed, best effort: a marker authorises one delete,
// and the holder's next write removes it anyway (the admission rule requires it). It runs under ctx's
// values but not its end (cleanupContext): a Delete that failed because ctx ended must not leave the
// marker armed, refusing every write without the token.
func (w *Writer) disarm(ctx context.Context, token elector.Token, key types.NamespacedName) {
	ctx, cancel := cleanupContext(ctx)
	defer cancel()
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, fencingv1alpha1.DeleteAtEpochAnnotation)
	_ = w.client.Patch(ctx, fr, client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner(token.FieldManager()))
}

// checkBinding refuses, before any write, a token for another Lease: such a write could never be fenced.
// Whether the epoch is current is the apiserver's decision, not the writer's.
func checkBinding(fr *fencingv1alpha1.FencedResource, token elector.Token) error {
	key := fr.Namespace + "/" + fr.Name
	if fr.Namespace != token.Lease.Namespace || fr.Spec.LeaseName != token.Lease.Name {
		return errorf(protocol.ReasonNotHolder, key, fr.Spec.LeaseName, token.Epoch, 0,
			"FencedResource %s is bound to lease %s/%s, not to the token's lease %s", key, fr.Namespace, fr.Spec.LeaseName, token.Lease)
	}
	return nil
}

// checkNotDeleting refuses, before any write, to write the data of a resource being deleted: it goes once
// its finalizers are removed, and the write with it (the apiserver refuses such a write too).
func checkNotDeleting(fr *fencingv1alpha1.FencedResource, token elector.Token) error {
	if fr.DeletionTimestamp == nil {
		return nil
	}
	key := fr.Namespace + "/" + fr.Name
	return errorf(protocol.ReasonInvalid, key, fr.Spec.LeaseName, token.Epoch, 0,
		"FencedResource %s is being deleted (deletionTimestamp %s, finalizers %q): its data would go with it; wait until it is gone, then create it again",
		key, fr.DeletionTimestamp.UTC().Format(time.RFC3339), fr.Finalizers)
}

func stamp(fr *fencingv1alpha1.FencedResource, token elector.Token) {
	fr.Spec.Epoch = token.Epoch
	if fr.Annotations == nil {
		fr.Annotations = map[string]string{}
	}
	fr.Annotations[fencingv1alpha1.WriterAnnotation] = token.Holder
	// A deletion marker left by a Delete that did not happen goes (a marker authorises one delete), and the
	// hold (this write is the one it was for).
	delete(fr.Annotations, fencingv1alpha1.DeleteAtEpochAnnotation)
	delete(fr.Annotations, fencingv1alpha1.HoldAtEpochAnnotation)
}

// epochPatch is the merge patch of a fenced write that sets nothing but a FencedResource's epoch and
// writer to token's, removes its deletion marker (like every fenced write but a Delete's marker write: a
// marker authorises one delete, and one of an earlier epoch left by a Delete that did not happen must not
// outlive the write), and sets annotations besides (a value nil removes one): fence-on-acquire's raise,
// the hold, and Set's first write to a resource without the writer annotation. It carries no
// resourceVersion, so it cannot conflict; the apiserver decides whether the epoch may be written.
func epochPatch(token elector.Token, annotations map[string]any) client.Patch {
	ann := map[string]any{fencingv1alpha1.WriterAnnotation: token.Holder, fencingv1alpha1.DeleteAtEpochAnnotation: nil}
	for k, v := range annotations {
		ann[k] = v
	}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": map[string]any{"epoch": token.Epoch}})
	if err != nil {
		panic(fmt.Sprintf("encoding a patch of strings and an integer: %v", err)) // cannot happen
	}
	return client.RawPatch(types.MergePatchType, raw)
}

// raisedEpochPatch is epochPatch for a declaration: spec.raisedEpoch instead of spec.epoch, and the hold of
// an earlier term removed.
func raisedEpochPatch(token elector.Token) client.Patch {
	ann := map[string]any{fencingv1alpha1.WriterAnnotation: token.Holder, fencingv1alpha1.DeleteAtEpochAnnotation: nil, fencingv1alpha1.HoldAtEpochAnnotation: nil}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": map[string]any{"raisedEpoch": token.Epoch}})
	if err != nil {
		panic(fmt.Sprintf("encoding a patch of strings and an integer: %v", err)) // cannot happen
	}
	return client.RawPatch(types.MergePatchType, raw)
}

func wrap(key types.NamespacedName, token elector.Token, err error) error {
	if fe := (*Error)(nil); errors.As(err, &fe) || apierrors.IsNotFound(err) {
		return err
	}
	return fmt.Errorf("writing FencedResource %s at epoch %d: %w", key, token.Epoch, err)
}

func emptyData(d *runtime.RawExtension) bool {
	return d == nil || len(d.Raw) == 0 || string(d.Raw) == "null"
}

var errTrailingData = errors.New("data after the JSON value")

// decodeExact decodes one JSON value, keeping numbers as json.Number (their exact text), so that a
// mutation writes them back bit-exact.
func decodeExact(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errTrailingData
	}
	return v, nil
}
