package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// The tests below declare a resource that one of the cluster's own controllers writes, with the real
// kube-controller-manager running, and assert the outcome docs/design/cluster-controllers.md
// decides for it: the controller works (its write is on internal/operator/admission's allowlist), or the policy
// says, in a warning and its ControllersRefused condition, which controller it refuses and what breaks.

// TestConfigMapsWithoutSelector: a policy on every ConfigMap does not cover kube-root-ca.crt: after the
// holder deleted it, root-ca-cert-publisher recreates it (Pods that mount projected ServiceAccount tokens
// need it).
func TestConfigMapsWithoutSelector(t *testing.T) {
	h := NewHolder(t, env, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, []rbacv1.PolicyRule{All("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps"})
	h.Acquire(t)
	root := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: "kube-root-ca.crt"}}
	testenv.Eventually(t, "the holder deletes kube-root-ca.crt", func() (bool, string) {
		err := h.C.Delete(t.Context(), root.DeepCopy())
		return err == nil, testenv.ErrString(err)
	})
	testenv.EventuallyWithin(t, 60*time.Second, "root-ca-cert-publisher recreates kube-root-ca.crt", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(root), &corev1.ConfigMap{})
		return err == nil, testenv.ErrString(err)
	})
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: "app"}}
	mustBeFenced(t, env.Client.Create(t.Context(), other, client.DryRunAll))
	state := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "state"}, Data: map[string]string{"v": "1"}}
	h.Create(t, state)
	h.TakeOver(t, state)
}

// TestJobTTL: ttl-after-finished-controller deletes a finished Job whose TTL the holder set.
func TestJobTTL(t *testing.T) {
	probe := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: batchv1.JobSpec{Template: podTemplate(corev1.RestartPolicyNever)}}
	h := NewHolder(t, env, probe, []rbacv1.PolicyRule{All("batch", "jobs")}, fencingv1alpha1.FencedObjects{Group: "batch", Resource: "jobs"})
	h.Acquire(t)
	// No kubelet runs its Pod: the deadline makes it finish (Failed, DeadlineExceeded) at once.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "report"}, Spec: batchv1.JobSpec{
		Template: podTemplate(corev1.RestartPolicyNever), ActiveDeadlineSeconds: ptr.To(int64(1)), TTLSecondsAfterFinished: ptr.To(int32(0)),
	}}
	h.Create(t, job)
	EventuallyObject(t, env, 60*time.Second, client.ObjectKeyFromObject(job), "the Job finishes", func(got *batchv1.Job) (bool, string) {
		for _, c := range got.Status.Conditions {
			if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.Status == corev1.ConditionTrue {
				return true, string(c.Type)
			}
		}
		return false, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})
	testenv.EventuallyWithin(t, 60*time.Second, "ttl-after-finished-controller deletes the finished Job", func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &batchv1.Job{})
		return apierrors.IsNotFound(err), testenv.ErrString(err)
	})
	// A suspended Job (no Pods, no deadline) to take over.
	nightly := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "nightly"}, Spec: batchv1.JobSpec{Template: podTemplate(corev1.RestartPolicyNever), Suspend: ptr.To(true)}}
	h.Create(t, nightly)
	h.TakeOver(t, nightly)
}

// TestPersistentVolumeClaimBinding: persistent-volume-binder binds a declared claim to its volume (the
// claim's spec.volumeName and the binding annotations are on the allowlist for it).
func TestPersistentVolumeClaimBinding(t *testing.T) {
	class := "fencekit-test-manual"
	claim := func(name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
	}
	h := NewHolder(t, env, claim("probe"), []rbacv1.PolicyRule{All("", "persistentvolumeclaims")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "persistentvolumeclaims"})
	h.Acquire(t)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: h.NS + "-data"}, Spec: corev1.PersistentVolumeSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: class,
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + h.NS}},
		ClaimRef:                      &corev1.ObjectReference{Namespace: h.NS, Name: "data"}, // this claim only
	}}
	if err := env.Client.Create(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), pv) })
	pvc := claim("data")
	h.Create(t, pvc)
	testenv.EventuallyWithin(t, 60*time.Second, "the PV and the claim are bound to each other", func() (bool, string) {
		var gotPV corev1.PersistentVolume
		var gotPVC corev1.PersistentVolumeClaim
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pv), &gotPV); err != nil {
			return false, err.Error()
		}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pvc), &gotPVC); err != nil {
			return false, err.Error()
		}
		s := fmt.Sprintf("PV %s, claimRef UID %q; claim %s (UID %s), volumeName %q", gotPV.Status.Phase, gotPV.Spec.ClaimRef.UID, gotPVC.Status.Phase, gotPVC.UID, gotPVC.Spec.VolumeName)
		return gotPV.Status.Phase == corev1.VolumeBound && gotPV.Spec.ClaimRef.UID == gotPVC.UID && gotPVC.Status.Phase == corev1.ClaimBound &&
			gotPVC.Spec.VolumeName == pv.Name, s
	})
	var bound corev1.PersistentVolumeClaim
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pvc), &bound); err != nil {
		t.Fatal(err)
	}
	relabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"relabelled":"by-hand"}}}`))
	mustBeFenced(t, env.Client.Patch(t.Context(), &bound, relabel)) // a patch: the binder may write the claim meanwhile
	h.TakeOver(t, pvc)
}

// TestServiceAccountTokenSecret: the tokens controller fills a declared ServiceAccount token Secret.
func TestServiceAccountTokenSecret(t *testing.T) {
	h := NewHolder(t, env, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, []rbacv1.PolicyRule{All("", "secrets")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "secrets"})
	h.Acquire(t)
	testenv.Eventually(t, "the serviceaccount controller creates ServiceAccount default", func() (bool, string) {
		err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: h.NS, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, testenv.ErrString(err)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "default-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
		Type: corev1.SecretTypeServiceAccountToken}
	h.Create(t, secret)
	EventuallyObject(t, env, 60*time.Second, client.ObjectKeyFromObject(secret), "the tokens controller fills the token Secret", func(got *corev1.Secret) (bool, string) {
		return len(got.Data[corev1.ServiceAccountTokenKey]) > 0, fmt.Sprintf("data keys %d", len(got.Data))
	})
	mustBeFenced(t, env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: "app"}}, client.DryRunAll))
	h.TakeOver(t, secret)
}

// TestReplicaSetsDeclared: with apps/replicasets declared, the deployment controller cannot create the
// Deployment's ReplicaSet, and the policy says so: its ControllersRefused condition names the controller
// and what breaks.
func TestReplicaSetsDeclared(t *testing.T) {
	h := NewHolder(t, env, testenv.Deployment("", "probe"), []rbacv1.PolicyRule{All("apps", "deployments", "deployments/status", "replicasets")},
		fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"}, fencingv1alpha1.FencedObjects{Group: "apps", Resource: "replicasets"})
	h.Acquire(t)
	d := testenv.Deployment("", "web")
	h.Create(t, d)
	EventuallyObject(t, env, 60*time.Second, client.ObjectKeyFromObject(d), "the Deployment's status says its ReplicaSet was refused", func(got *appsv1.Deployment) (bool, string) {
		for _, c := range got.Status.Conditions {
			if c.Reason == "ReplicaSetCreateError" && strings.Contains(c.Message, "ReplicaSet "+h.NS+"/web-") {
				t.Logf("Deployment condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
				return true, c.Message
			}
		}
		return false, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})
	var list appsv1.ReplicaSetList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(h.NS)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d ReplicaSets exist, want none: the deployment controller's create is refused", len(list.Items))
	}
	EventuallyObject(t, env, testenv.EventuallyTimeout, types.NamespacedName{Namespace: h.NS, Name: "app"}, "the policy's ControllersRefused condition names the deployment controller", func(p *fencingv1alpha1.FencingPolicy) (bool, string) {
		c := meta.FindStatusCondition(p.Status.Conditions, fencingv1alpha1.ConditionControllersRefused)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "kube-system:deployment-controller") &&
			strings.Contains(c.Message, "rollouts stall"), fmt.Sprint(c)
	})
	h.TakeOver(t, d)
}

// mustBeFenced fails unless err is fencekit's refusal of a write without a token: the objects next to
// the ones the cluster's controllers may write stay fenced.
func mustBeFenced(t *testing.T, err error) {
	t.Helper()
	if !fencing.IsTokenMissing(err) {
		t.Errorf("a write without a token next to the controller's: %v, want it refused for its missing token", testenv.ErrString(err))
	}
}

func podTemplate(restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: restart,
		Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
}
