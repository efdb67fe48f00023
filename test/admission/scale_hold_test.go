package admission_test

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestScaleWritesArmTheHoldOnAStaleResourceVersion: a scale write through NewClient that names a
// resourceVersion older than the object's (an editor's free write came between) has lost a
// compare-and-swap, whether it is an update of the Scale or a patch naming the resourceVersion: both arm
// the holder's hold, so the editor's next free write waits for the holder's retry, and the retry wins.
func TestScaleWritesArmTheHoldOnAStaleResourceVersion(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"},
		fencingv1alpha1.FencedObjects{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}})
	tok := holder.Acquire(t, ns, appLease, 1)
	fenced := fencing.NewClient(holder.Client, tokenOf(tok))
	editor := env.ClientAs(t, "editor")
	for i, write := range []struct {
		kind  string
		scale func(name, rv string) error
	}{
		{"an update of the Scale", func(name, rv string) error {
			return fenced.SubResource("scale").Update(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.WithSubResourceBody(&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv},
					Spec: autoscalingv1.ScaleSpec{Replicas: 3}}))
		}},
		{"a merge patch naming the resourceVersion", func(name, rv string) error {
			return fenced.SubResource("scale").Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"replicas":3}}`, rv))))
		}},
	} {
		name := fmt.Sprintf("app-%d", i)
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}}}
		if err := retryRBAC(t, "the holder's Deployment", func() error { return fenced.Create(ctx, dep) }); err != nil {
			t.Fatal(err)
		}
		read := testenv.Read[appsv1.Deployment](t, env.Client, ns, name).ResourceVersion
		finalizer := func(f string) error {
			return editor.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, f))))
		}
		if err := retryRBAC(t, "the editor's finalizer", func() error { return finalizer("example.com/a") }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
		err := write.scale(name, read)
		t.Logf("%s at the resourceVersion read before the editor's write: %v", write.kind, err)
		if !apierrors.IsConflict(err) {
			t.Errorf("%s naming a stale resourceVersion: %v, want a conflict", write.kind, err)
		}
		stored := testenv.Read[appsv1.Deployment](t, env.Client, ns, name)
		if got := stored.Annotations[fencingv1alpha1.HoldAtEpochAnnotation]; got != "1" {
			t.Errorf("%s lost its compare-and-swap, but the holder's hold is %q, want 1", write.kind, got)
		}
		err = finalizer("example.com/b")
		t.Logf("the editor's next free write, the hold armed: %v", err)
		if !fencing.IsTokenMissing(err) {
			t.Errorf("after %s armed the hold, the editor's free write: %v, want it to wait (FencingTokenMissing)", write.kind, err)
		}
		if err := write.scale(name, stored.ResourceVersion); err != nil {
			t.Errorf("the holder's retry of %s at the resourceVersion it read again: %v", write.kind, err)
		}
	}
}
