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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/testenv"
)

// The tests below declare a resource that one of the cluster's own controllers writes, and assert what
// happens today: that controller's write is refused, and kube-controller-manager's log shows the refusal.
// Decision pending in the admission allowlist (issue 21): when it lands, each of these asserts the
// outcome decided for its resource (the controller works, the declaration is refused, or it is admitted
// with a warning naming the controller).

// TestPendingConfigMapsWithoutSelector: root-ca-cert-publisher cannot recreate kube-root-ca.crt once the
// holder deleted it (Pods that mount projected ServiceAccount tokens need it).
// Decision pending in the admission allowlist (issue 21).
func TestPendingConfigMapsWithoutSelector(t *testing.T) {
	h := newHolder(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, []rbacv1.PolicyRule{all("", "configmaps")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "configmaps"})
	h.acquire(t)
	root := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "kube-root-ca.crt"}}
	testenv.Eventually(t, "the holder deletes kube-root-ca.crt", func() (bool, string) {
		err := h.c.Delete(t.Context(), root.DeepCopy())
		return err == nil, errString(err)
	})
	kcmSays(t, "root-ca-cert-publisher is refused recreating kube-root-ca.crt", h.ns+"/kube-root-ca.crt", "presents no fencing token")
	err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(root), &corev1.ConfigMap{})
	if err == nil {
		t.Errorf("kube-root-ca.crt was recreated: the decision of issue 21 landed? update this test")
	}
}

// TestPendingJobTTL: ttl-after-finished-controller's DELETE of a finished Job is refused; the Job stays.
// Decision pending in the admission allowlist (issue 21).
func TestPendingJobTTL(t *testing.T) {
	probe := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: batchv1.JobSpec{Template: podTemplate(corev1.RestartPolicyNever)}}
	h := newHolder(t, probe, []rbacv1.PolicyRule{all("batch", "jobs")}, fencingv1alpha1.FencedObjects{Group: "batch", Resource: "jobs"})
	h.acquire(t)
	// No kubelet runs its Pod: the deadline makes it finish (Failed, DeadlineExceeded) at once.
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "report"}, Spec: batchv1.JobSpec{
		Template: podTemplate(corev1.RestartPolicyNever), ActiveDeadlineSeconds: ptr.To(int64(1)), TTLSecondsAfterFinished: ptr.To(int32(0)),
	}}
	h.create(t, job)
	testenv.EventuallyWithin(t, 60*time.Second, "the Job finishes", func() (bool, string) {
		var got batchv1.Job
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.Status == corev1.ConditionTrue {
				return true, string(c.Type)
			}
		}
		return false, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})
	kcmSays(t, "ttl-after-finished-controller is refused deleting the Job", "Failed to clean up job", "Job "+h.ns+"/report is fenced by FencingPolicy", "may delete it")
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), &batchv1.Job{}); err != nil {
		t.Errorf("the finished Job: %v; want it still there (its TTL delete refused)", err)
	}
}

// TestPendingPersistentVolumeClaimBinding: persistent-volume-binder binds the PV to the claim (the PV is
// not fenced) but its update of the claim is refused: the PV shows Bound with the claim's UID while the
// claim stays Pending (half-bound). Decision pending in the admission allowlist (issue 21).
func TestPendingPersistentVolumeClaimBinding(t *testing.T) {
	class := "fencekit-test-manual"
	claim := func(name string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		}}
	}
	h := newHolder(t, claim("probe"), []rbacv1.PolicyRule{all("", "persistentvolumeclaims")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "persistentvolumeclaims"})
	h.acquire(t)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: h.ns + "-data"}, Spec: corev1.PersistentVolumeSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: class,
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + h.ns}},
		ClaimRef:                      &corev1.ObjectReference{Namespace: h.ns, Name: "data"}, // this claim only
	}}
	if err := env.Client.Create(t.Context(), pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), pv) })
	pvc := claim("data")
	h.create(t, pvc)
	kcmSays(t, "persistent-volume-binder is refused updating the claim", "PersistentVolumeClaim "+h.ns+"/data", "fencing token")
	testenv.Eventually(t, "the PV is bound to the claim while the claim stays Pending", func() (bool, string) {
		var gotPV corev1.PersistentVolume
		var gotPVC corev1.PersistentVolumeClaim
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pv), &gotPV); err != nil {
			return false, err.Error()
		}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pvc), &gotPVC); err != nil {
			return false, err.Error()
		}
		s := fmt.Sprintf("PV %s, claimRef UID %q; claim %s (UID %s), volumeName %q", gotPV.Status.Phase, gotPV.Spec.ClaimRef.UID, gotPVC.Status.Phase, gotPVC.UID, gotPVC.Spec.VolumeName)
		return gotPV.Status.Phase == corev1.VolumeBound && gotPV.Spec.ClaimRef.UID == gotPVC.UID && gotPVC.Status.Phase == corev1.ClaimPending, s
	})
}

// TestPendingServiceAccountTokenSecret: the tokens controller cannot fill a ServiceAccount token Secret.
// Decision pending in the admission allowlist (issue 21).
func TestPendingServiceAccountTokenSecret(t *testing.T) {
	h := newHolder(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, []rbacv1.PolicyRule{all("", "secrets")},
		fencingv1alpha1.FencedObjects{Group: "", Resource: "secrets"})
	h.acquire(t)
	testenv.Eventually(t, "the serviceaccount controller creates ServiceAccount default", func() (bool, string) {
		err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: h.ns, Name: "default"}, &corev1.ServiceAccount{})
		return err == nil, errString(err)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "default-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
		Type: corev1.SecretTypeServiceAccountToken}
	h.create(t, secret)
	kcmSays(t, "the tokens controller is refused filling the token Secret", "Secret "+h.ns+"/default-token", "fencing token")
	var got corev1.Secret
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(secret), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Data[corev1.ServiceAccountTokenKey]) != 0 {
		t.Errorf("the token Secret was filled: the decision of issue 21 landed? update this test")
	}
}

// TestPendingReplicaSets: with apps/replicasets declared, the deployment controller cannot create the
// Deployment's ReplicaSet (documented in docs/design.md). Decision pending in the admission allowlist
// (issue 21).
func TestPendingReplicaSets(t *testing.T) {
	h := newHolder(t, deployment("probe"), []rbacv1.PolicyRule{all("apps", "deployments", "deployments/status", "replicasets")},
		fencingv1alpha1.FencedObjects{Group: "apps", Resource: "deployments"}, fencingv1alpha1.FencedObjects{Group: "apps", Resource: "replicasets"})
	h.acquire(t)
	d := deployment("web")
	h.create(t, d)
	testenv.EventuallyWithin(t, 60*time.Second, "the Deployment's status says its ReplicaSet was refused", func() (bool, string) {
		var got appsv1.Deployment
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), &got); err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Reason == "ReplicaSetCreateError" && strings.Contains(c.Message, "ReplicaSet "+h.ns+"/web-") {
				t.Logf("Deployment condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
				return true, c.Message
			}
		}
		return false, fmt.Sprintf("conditions %v", got.Status.Conditions)
	})
	var list appsv1.ReplicaSetList
	if err := env.Client.List(t.Context(), &list, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d ReplicaSets exist: the decision of issue 21 landed? update this test", len(list.Items))
	}
}

func podTemplate(restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: restart,
		Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
}
