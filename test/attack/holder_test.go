package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// holderWrite is one of the holder's writes of I2: it must succeed after any step.
type holderWrite struct {
	name string
	run  func(ctx context.Context) error
}

// headroom are the holder's writes of every kind (I2), on the objects the step touched where they are
// of the kind, else on the world's defaults; value sizes come from vals.
func (w *world) headroom(s step, vals func(n int) string) []holderWrite {
	cm, fr := "config", "fr-0"
	if s.route.parent.Resource == "configmaps" && s.target != ownerName && s.target != dependentName && isWorldName("configmaps", s.target) {
		cm = s.target
	}
	if s.route.parent.Resource == "fencedresources" && isWorldName("fencedresources", s.target) {
		fr = s.target
	}
	tok := w.token()
	fc := fencing.NewClient(w.holderC, tokenFunc(tok))
	writer := fencing.NewWriter(w.holderC)
	applied, merged := vals(48*1024), vals(64)
	cmObj := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: cm}}
	}
	return []holderWrite{
		{"server-side apply (NewClient.Apply) of ConfigMap " + cm, func(ctx context.Context) error {
			before := w.get(ctx, "configmaps", cm)
			err := fc.Apply(ctx, corev1ac.ConfigMap(cm, w.ns).WithLabels(map[string]string{coverageLabel: coverageValue, worldLabel: "true"}).
				WithData(map[string]string{"i2-apply": applied}))
			if err != nil {
				return err
			}
			return prunedNothing(before, w.get(ctx, "configmaps", cm), "i2-apply")
		}},
		{"server-side apply of FencedResource " + fr, func(ctx context.Context) error {
			body, _ := json.Marshal(map[string]any{"apiVersion": fencingv1alpha1.GroupVersion.String(), "kind": "FencedResource",
				"metadata": map[string]any{"name": fr, "namespace": w.ns, "annotations": map[string]string{fencingv1alpha1.WriterAnnotation: tok.Holder}},
				"spec":     map[string]any{"leaseName": leaseName, "epoch": tok.Epoch, "data": map[string]any{"i2-apply": applied}}})
			return w.holderC.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: fr}},
				client.RawPatch(types.ApplyPatchType, body), client.FieldOwner(tok.FieldManager()), client.ForceOwnership)
		}},
		{"merge patch (NewClient.Patch) of ConfigMap " + cm, func(ctx context.Context) error {
			return fc.Patch(ctx, cmObj(), client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"data":{"i2-merge":%q}}`, merged)))
		}},
		{"JSON patch of ConfigMap " + cm, func(ctx context.Context) error {
			ops, _ := json.Marshal([]jsonPatchOp{
				{Op: "add", Path: "/metadata/annotations/" + strings.ReplaceAll(fencingv1alpha1.ObjectEpochAnnotation, "/", "~1"), Value: strconv.FormatInt(tok.Epoch, 10)},
				{Op: "add", Path: "/data/i2-json", Value: merged}})
			return w.holderC.Patch(ctx, cmObj(), client.RawPatch(types.JSONPatchType, ops), client.FieldOwner(tok.FieldManager()))
		}},
		{"update (NewClient.Update, read again on a conflict) of ConfigMap " + cm, func(ctx context.Context) error {
			// A compare-and-swap loses to any write in between, free ones too: the holder reads again and
			// retries, as a controller requeues, until its deadline.
			for {
				var c corev1.ConfigMap
				if err := w.holderC.Get(ctx, w.key(cm), &c); err != nil {
					return err
				}
				if c.Data == nil {
					c.Data = map[string]string{}
				}
				c.Data["i2-update"] = merged
				err := fc.Update(ctx, &c)
				if !apierrors.IsConflict(err) || ctx.Err() != nil {
					return err
				}
			}
		}},
		{"Writer.Set of FencedResource " + fr, func(ctx context.Context) error {
			_, err := writer.Set(ctx, tok, w.key(fr), map[string]any{"v": merged, "name": fr})
			return err
		}},
		{"Writer.Update of FencedResource " + fr, func(ctx context.Context) error {
			_, err := writer.Update(ctx, tok, w.key(fr), func(d map[string]any) error { d["i2-update"] = merged; return nil })
			return err
		}},
		{"Writer.Delete of FencedResource " + scratchFR, func(ctx context.Context) error {
			if err := writer.Delete(ctx, tok, w.key(scratchFR)); err != nil {
				return err
			}
			return w.recreate(worldObject{"fencedresources", "FencedResource", scratchFR})
		}},
		{"NewClient.Delete of ConfigMap " + scratchCM, func(ctx context.Context) error {
			if err := fc.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: scratchCM}}); err != nil {
				return err
			}
			return w.recreate(worldObject{"configmaps", "ConfigMap", scratchCM})
		}},
	}
}

// prunedNothing fails if the holder's apply, which sends only key, changed any other fenced content of
// the ConfigMap than key and fencekit's annotations: an apply prunes what its entry alone owns, so a
// tokenless write that moved ownership into it would delete data.
func prunedNothing(before, after *unstructured.Unstructured, key string) error {
	if before == nil || after == nil {
		return nil
	}
	strip := func(u *unstructured.Unstructured) content {
		u = u.DeepCopy()
		unstructured.RemoveNestedField(u.Object, "data", key)
		c := contentOf(u)
		for k := range c {
			if strings.HasPrefix(k, "metadata.annotations[") {
				delete(c, k)
			}
		}
		return c
	}
	if d := diff(after.GetName(), strip(before), strip(after)); len(d) > 0 {
		return fmt.Errorf("the holder's apply of data.%s changed what it did not send: %v", key, d)
	}
	return nil
}

// gone waits until o no longer exists, removing the finalizers that hold it (free ones as the editor,
// then any as an admin) if it lingers.
func (w *world) gone(o worldObject) error {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	start := time.Now()
	var last string
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		u := w.get(ctx, o.resource, o.name)
		if u == nil {
			return true, nil
		}
		last = fmt.Sprintf("finalizers %v, deletionTimestamp %v", u.GetFinalizers(), u.GetDeletionTimestamp())
		if u.GetDeletionTimestamp() == nil {
			return false, nil
		}
		if len(u.GetFinalizers()) == 0 {
			// A bound Pod waits for its kubelet, which does not run: the admin deletes it at once.
			err := w.admin.Resource(gvrOf(o.resource)).Namespace(w.ns).Delete(ctx, o.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				last += "; the admin's delete: " + err.Error()
			}
			return false, nil
		}
		var keep []string
		for _, f := range u.GetFinalizers() {
			// The garbage collector processes its own finalizers, if it runs; give it a moment.
			if slices.Contains(gcFinalizers, f) && w.gc && time.Since(start) < 15*time.Second {
				keep = append(keep, f)
			}
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": keep, "resourceVersion": u.GetResourceVersion()}})
		if err != nil {
			return false, err
		}
		if _, err := w.admin.Resource(gvrOf(o.resource)).Namespace(w.ns).Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			last += "; the admin removing them: " + err.Error()
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last seen: %s)", err, last)
	}
	return nil
}

// recreate makes world object o again after it was deleted: the GitOps tool declares a FencedResource
// and the holder writes it; the holder creates a ConfigMap or Pod with its fenced client.
func (w *world) recreate(o worldObject) error {
	if err := w.gone(o); err != nil {
		return fmt.Errorf("waiting for %s to be gone before recreating it: %w", o, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	tok := w.token()
	fc := fencing.NewClient(w.holderC, tokenFunc(tok))
	var err error
	switch o.resource {
	case "fencedresources":
		if err = w.actors[actorGitOps].c.Create(ctx, w.declaration(o.name)); err == nil {
			_, err = fencing.NewWriter(w.holderC).Set(ctx, tok, w.key(o.name), map[string]any{"v": "holder", "name": o.name})
		}
	case "pods":
		err = fc.Create(ctx, w.pod(o.name))
	default:
		switch o.name {
		case dependentName:
			err = w.createDependent(fc)
		case "cm-gitops":
			if err = w.gitopsApply(ctx, o.name); err != nil && fencing.IsTokenMissing(err) {
				err = fc.Create(ctx, w.configMap(o.name, map[string]string{"v": "holder"})) // the policy covers it now: only the holder creates it
			}
		default:
			err = fc.Create(ctx, w.configMap(o.name, map[string]string{"v": "holder"}))
		}
	}
	if err != nil {
		return fmt.Errorf("recreating %s: %w", o, err)
	}
	return nil
}

// ensure puts the world back as the holder wants it after a step: objects that are gone or being deleted
// (outside a deletion under test) made again, a bound Pod replaced, the dependent owned by the current
// owner, the coverage label back. It returns what it did, for the story.
func (w *world) ensure(deleting bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*stepTimeout)
	defer cancel()
	var did []string
	owner := w.get(ctx, "configmaps", ownerName)
	for _, o := range worldObjects() {
		if deleting && (o.name == ownerName || o.name == dependentName) {
			continue
		}
		u := w.get(ctx, o.resource, o.name)
		fc := w.fenced()
		switch {
		case u == nil:
		case u.GetDeletionTimestamp() != nil:
		case o.kind == "Pod" && u.Object["spec"].(map[string]any)["nodeName"] != nil:
			if err := fc.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: o.name}}, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				return did, fmt.Errorf("the holder deleting the bound Pod %s: %w", o.name, err)
			}
		case o.name == dependentName && (owner == nil || !ownedBy(u, owner)):
			if err := fc.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: o.name}}); err != nil && !apierrors.IsNotFound(err) {
				return did, fmt.Errorf("the holder deleting the dependent that lost its owner: %w", err)
			}
		case o.kind == "ConfigMap" && u.GetLabels()[coverageLabel] != coverageValue:
			did = append(did, "the holder labels "+o.String()+" for the policy again")
			patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, coverageLabel, coverageValue)
			if err := fc.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: o.name}}, client.RawPatch(types.MergePatchType, patch)); err != nil {
				return did, fmt.Errorf("the holder labelling %s: %w", o, err)
			}
			continue
		default:
			continue
		}
		if o.name == ownerName {
			// The dependent goes with it (the garbage collector) and is made again after it.
			defer func() { _ = w.recreateIfGone(worldObject{"configmaps", "ConfigMap", dependentName}) }()
		}
		did = append(did, "the holder makes "+o.String()+" again")
		if err := w.recreate(o); err != nil {
			return did, err
		}
	}
	return did, nil
}

func (w *world) recreateIfGone(o worldObject) error {
	if u := w.get(context.Background(), o.resource, o.name); u != nil && u.GetDeletionTimestamp() == nil {
		owner := w.get(context.Background(), "configmaps", ownerName)
		if o.name != dependentName || (owner != nil && ownedBy(u, owner)) {
			return nil
		}
		_ = w.fenced().Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: o.name}})
	}
	return w.recreate(o)
}

func ownedBy(u, owner *unstructured.Unstructured) bool {
	return slices.ContainsFunc(u.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner.GetUID() })
}
