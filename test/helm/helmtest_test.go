package helm_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestHelmTestHook runs the chart's `helm test` hook on the local apiserver, as far as it can run without a
// kubelet: the release's RBAC and policies are applied, the operator runs in-process as the chart's
// ServiceAccount and serves the webhook, Helm's hook objects (ServiceAccount, RoleBinding to the elector role,
// Lease, FencedResource) are applied in hook-weight order, and the hook pod's command (`fencekit selftest`
// with the pod's arguments) runs as a process authorized as the pod's ServiceAccount. It passes; and with the
// webhook configuration removed (a stale write then passes the CRD's own rule), it fails and says so.
func TestHelmTestHook(t *testing.T) {
	release := env.Namespace(t)
	testNS := env.Namespace(t)
	r := releaseObjects(t, "selftest", release, "--set", "tests.namespace="+testNS)
	var hooks rendered
	for _, u := range r {
		if !isHook(u) {
			continue
		}
		if u.GetAnnotations()["helm.sh/hook"] != "test" || !strings.Contains(u.GetAnnotations()["helm.sh/hook-delete-policy"], "hook-succeeded") {
			t.Errorf("%s %s: hook annotations %v, want a test hook Helm deletes when it passes", u.GetKind(), u.GetName(), u.GetAnnotations())
		}
		if u.GetKind() == "RoleBinding" && !strings.Contains(u.GetAnnotations()["helm.sh/hook-delete-policy"], "hook-failed") {
			t.Errorf("RoleBinding %s: hook-delete-policy %q: the elector role would outlive a failed test", u.GetName(), u.GetAnnotations()["helm.sh/hook-delete-policy"])
		}
		hooks = append(hooks, u)
	}
	applyKinds(t, r, accessKinds)
	startChartOperator(t, serviceAccount(release, "selftest-fencekit-manager"), r, release)

	// Helm creates the hook's objects by ascending hook weight, the pod last.
	slices.SortStableFunc(hooks, func(a, b *unstructured.Unstructured) int { return weight(t, a) - weight(t, b) })
	var pod *corev1.Pod
	for _, u := range hooks {
		if u.GetNamespace() != testNS {
			t.Errorf("hook %s %s is in namespace %s, not tests.namespace %s", u.GetKind(), u.GetName(), u.GetNamespace(), testNS)
		}
		if u.GetKind() == "Pod" {
			pod = as[corev1.Pod](t, u)
			continue
		}
		apply(t, u)
	}
	if pod == nil || hooks[len(hooks)-1].GetKind() != "Pod" {
		t.Fatalf("the hook's pod is missing or not created last: %v", hooks.names())
	}
	c := pod.Spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/fencekit"}) || len(c.Args) == 0 || c.Args[0] != "selftest" {
		t.Fatalf("the hook pod runs %v %v, want the image's /fencekit selftest", c.Command, c.Args)
	}
	sa := serviceAccount(testNS, pod.Spec.ServiceAccountName)
	waitFor(t, "the hook's RoleBinding to take effect", func(context.Context) (bool, error) {
		return allowed(t, sa, access{verb: "update", group: "fencing.fencekit.io", resource: "fencedresources", namespace: testNS}), nil
	})

	bin := filepath.Join(t.TempDir(), "fencekit")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/fencekit")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building cmd/fencekit: %v\n%s", err, out)
	}
	selftest := func() (string, error) {
		cmd := exec.CommandContext(t.Context(), bin, append(slices.Clone(c.Args), "--kubeconfig", kubeconfig(t, sa))...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := selftest()
	if err != nil || !strings.Contains(out, "refused by the webhook") || !strings.Contains(out, "selftest passed") {
		t.Fatalf("fencekit selftest as the hook pod: %v\n%s", err, out)
	}
	t.Logf("fencekit selftest:\n%s", out)

	// Without the webhook the stale write passes the CRD's rule (its epoch is above the stored one): the
	// selftest must fail, not pass.
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "validating-webhook-configuration"}, vwc); err != nil {
		t.Fatal(err)
	}
	restore := vwc.DeepCopy()
	restore.ResourceVersion, restore.UID = "", ""
	if err := env.Client.Delete(t.Context(), vwc); err != nil {
		t.Fatal(err)
	}
	restored := false
	put := func() {
		if !restored {
			restored = true
			if err := env.Client.Create(context.Background(), restore); err != nil {
				t.Errorf("restoring the webhook configuration: %v", err)
			}
		}
	}
	t.Cleanup(put)
	var last string
	waitFor(t, "fencekit selftest to fail without the webhook", func(context.Context) (bool, error) {
		// The apiserver stops calling the webhook a moment after the configuration is deleted.
		out, err := selftest()
		last = out
		return err != nil, nil
	})
	if !strings.Contains(last, "was admitted: fencekit's webhook does not fence") {
		t.Errorf("fencekit selftest without the webhook failed, but not naming the admitted stale write:\n%s", last)
	}
	put()
}

func weight(t *testing.T, u *unstructured.Unstructured) int {
	t.Helper()
	w, err := strconv.Atoi(u.GetAnnotations()["helm.sh/hook-weight"])
	if err != nil {
		t.Fatalf("%s %s: hook weight %q", u.GetKind(), u.GetName(), u.GetAnnotations()["helm.sh/hook-weight"])
	}
	return w
}

// TestHelmTestHookNamespace: the hook runs where the webhook checks FencedResources: an explicit
// tests.namespace the webhook skips fails the render, and a release in "default" (skipped by its own webhook)
// renders no hook rather than one that could never pass.
func TestHelmTestHookNamespace(t *testing.T) {
	if _, err := template(t, ns, "--set", "tests.namespace=kube-system"); err == nil || !strings.Contains(err.Error(), "tests.namespace kube-system is not checked by the webhook") {
		t.Errorf("tests.namespace=kube-system: %v, want a refusal", err)
	}
	if _, err := template(t, ns, "--set", "tests.namespace=team-a,webhook.excludeNamespaces={team-a}"); err == nil || !strings.Contains(err.Error(), "tests.namespace team-a is not checked") {
		t.Errorf("tests.namespace in webhook.excludeNamespaces: %v, want a refusal", err)
	}
	// Nothing that selects the operator's pods (Services, the PDB, the NetworkPolicy) selects the hook's pod.
	r := objects(t, ns)
	d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
	if pod := r.get(t, "Pod", "fencekit-selftest"); labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(pod.GetLabels())) {
		t.Errorf("the operator's selector %v selects the hook pod (labels %v)", d.Spec.Selector.MatchLabels, pod.GetLabels())
	}
	for _, tc := range []struct {
		namespace string
		args      []string
		hookNS    string
	}{{ns, nil, "default"}, {"default", []string{"--set", "allowSystemNamespace=true"}, ""}, {"default", []string{"--set", "allowSystemNamespace=true,tests.namespace=checks"}, "checks"}, {ns, []string{"--set", "tests.enabled=false"}, ""}} {
		var got []string
		for _, u := range objects(t, tc.namespace, tc.args...) {
			if isHook(u) {
				got = append(got, u.GetNamespace())
			}
		}
		if tc.hookNS == "" && len(got) != 0 || tc.hookNS != "" && (len(got) != 5 || slices.ContainsFunc(got, func(n string) bool { return n != tc.hookNS })) {
			t.Errorf("release in %s with %v: hook objects in %v, want 5 in %q", tc.namespace, tc.args, got, tc.hookNS)
		}
	}
}
