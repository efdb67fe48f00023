package helm_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

const ns = "fencekit-system"

// as converts a rendered object to its typed form.
func as[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("converting %s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// args parses the manager container's --name=value arguments.
func args(t *testing.T, d *appsv1.Deployment) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Fatalf("argument %q is not --name=value", a)
		}
		out[name] = value
	}
	return out
}

func TestLint(t *testing.T) {
	for _, values := range [][]string{nil, {"--set", "certManager.enabled=true,serviceMonitor.enabled=true,networkPolicy.enabled=true",
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`}} {
		out, err := helm(t, append([]string{"lint", "--strict", chartDir, "--namespace", ns, "--kube-version", kubeVersion}, values...)...)
		if err != nil {
			t.Errorf("helm lint --strict %v: %v\n%s", values, err, out)
		}
	}
}

func TestTemplateDefaults(t *testing.T) {
	r := objects(t, ns)
	checkConsistent(t, r, "fencekit", ns)

	want := []string{
		"ServiceAccount/fencekit-manager", "ClusterRole/fencekit-manager", "ClusterRoleBinding/fencekit-manager",
		"Role/fencekit-manager", "RoleBinding/fencekit-manager", "ClusterRole/fencekit-elector",
		"Deployment/fencekit-manager", "PodDisruptionBudget/fencekit-manager", "Service/fencekit-webhook",
		"Service/fencekit-metrics", "Secret/fencekit-webhook-cert", "ValidatingWebhookConfiguration/fencekit-validating-webhook",
		"ValidatingWebhookConfiguration/fencekit-objects", "ValidatingAdmissionPolicy/fencekit-fenced-leases", "ValidatingAdmissionPolicyBinding/fencekit-fenced-leases",
		"ValidatingAdmissionPolicy/fencekit-unchecked-namespaces", "ValidatingAdmissionPolicyBinding/fencekit-unchecked-namespaces",
		"ValidatingAdmissionPolicy/fencekit-operator-leases", "ValidatingAdmissionPolicyBinding/fencekit-operator-leases",
		"ValidatingAdmissionPolicy/fencekit-operator-webhooks", "ValidatingAdmissionPolicyBinding/fencekit-operator-webhooks",
		"ClusterRole/fencekit-metrics-auth", "ClusterRoleBinding/fencekit-metrics-auth", "ClusterRole/fencekit-metrics-reader",
		"CustomResourceDefinition/fencedresources.fencing.fencekit.io", "CustomResourceDefinition/fencingpolicies.fencing.fencekit.io",
		// The helm test hook (helm template renders it; helm install does not).
		"ServiceAccount/fencekit-selftest", "RoleBinding/fencekit-selftest", "Lease/fencekit-selftest",
		"FencedResource/fencekit-selftest", "Pod/fencekit-selftest",
	}
	got := r.names()
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects rendered with default values (-want +got):\n%s", diff)
	}

	d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
	if *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %d, want 2", *d.Spec.Replicas)
	}
	if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("rolling update may take a serving webhook replica away first: %+v", d.Spec.Strategy.RollingUpdate)
	}
	pod := d.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext is not restricted: %+v", psc)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext is not restricted: %+v", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources: %+v, want cpu and memory requests and a memory limit", c.Resources)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.LivenessProbe, "/healthz"}, {c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %s: %+v", p.path, p.probe)
		}
	}
	if port := containerPort(c, "health"); port != 8081 {
		t.Errorf("health port = %d, want 8081", port)
	}
	a := args(t, d)
	for name, want := range map[string]string{
		"health-probe-bind-address": ":8081", "metrics-bind-address": ":8443", "metrics-secure": "true", "webhook-port": "9443",
		"leader-elect": "true", "cert-rotation": "true", "webhook-cert-dir": "/tmp/k8s-webhook-server/serving-certs",
	} {
		if a[name] != want {
			t.Errorf("--%s=%q, want %q", name, a[name], want)
		}
	}
	envs := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			envs[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if diff := cmp.Diff(map[string]string{"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}, envs); diff != "" {
		t.Errorf("downward API env (-want +got):\n%s", diff)
	}
	if v := certVolume(t, d); v.EmptyDir == nil {
		t.Errorf("without cert-manager the cert volume must be an emptyDir the operator writes: %+v", v.VolumeSource)
	}

	vwc := as[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.get(t, "ValidatingWebhookConfiguration", "fencekit-validating-webhook"))
	if len(vwc.Webhooks) == 0 {
		t.Fatal("the webhook configuration has no webhooks")
	}
	for _, w := range vwc.Webhooks {
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("webhook %s: failurePolicy %v, want Fail", w.Name, w.FailurePolicy)
		}
		if w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 {
			t.Errorf("webhook %s: timeoutSeconds %v, want 5", w.Name, w.TimeoutSeconds)
		}
		if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
			t.Errorf("webhook %s: sideEffects %v, want None", w.Name, w.SideEffects)
		}
		want := []string{ns, "kube-system"}
		if sel := w.NamespaceSelector; sel == nil || len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Key != "kubernetes.io/metadata.name" ||
			sel.MatchExpressions[0].Operator != "NotIn" || !slices.Equal(sel.MatchExpressions[0].Values, want) {
			t.Errorf("webhook %s: namespaceSelector %+v, want kubernetes.io/metadata.name NotIn %v", w.Name, sel, want)
		}
		for _, rule := range w.Rules {
			if !slices.Equal(rule.APIGroups, []string{"fencing.fencekit.io"}) ||
				!slices.Equal(rule.Resources, []string{"fencedresources", "fencedresources/*"}) && !slices.Equal(rule.Resources, []string{"fencingpolicies", "fencingpolicies/status"}) {
				t.Errorf("webhook %s intercepts more than fencekit's own kinds: %+v", w.Name, rule)
			}
		}
		if w.ClientConfig.Service == nil || w.ClientConfig.Service.Port == nil || *w.ClientConfig.Service.Port != 443 {
			t.Errorf("webhook %s: clientConfig %+v, want the webhook Service on 443", w.Name, w.ClientConfig)
		}
	}
	if _, ok := vwc.Annotations["cert-manager.io/inject-ca-from"]; ok {
		t.Error("cert-manager's inject-ca-from annotation without cert-manager")
	}

	pdb := as[policyv1.PodDisruptionBudget](t, r.get(t, "PodDisruptionBudget", "fencekit-manager"))
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable = %v, want 1", pdb.Spec.MinAvailable)
	}
	checkLeastPrivilege(t, r)
}

// checkLeastPrivilege asserts what must never appear in the chart's RBAC: wildcards, Secrets cluster-wide,
// Secret access beyond the certificate Secret's name for reads of single objects and writes.
func checkLeastPrivilege(t *testing.T, r rendered) {
	t.Helper()
	for _, u := range append(r.ofKind("ClusterRole"), r.ofKind("Role")...) {
		var rules []rbacv1.PolicyRule
		if u.GetKind() == "Role" {
			rules = as[rbacv1.Role](t, u).Rules
		} else {
			rules = as[rbacv1.ClusterRole](t, u).Rules
		}
		for _, rule := range rules {
			if slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
				t.Errorf("%s %s has a wildcard rule: %+v", u.GetKind(), u.GetName(), rule)
			}
			for _, v := range []string{"delete", "deletecollection", "escalate", "bind", "impersonate"} {
				if slices.Contains(rule.Verbs, v) {
					t.Errorf("%s %s grants %s: %+v", u.GetKind(), u.GetName(), v, rule)
				}
			}
			if slices.Contains(rule.Resources, "secrets") {
				if u.GetKind() == "ClusterRole" {
					t.Errorf("ClusterRole %s grants Secrets in every namespace: %+v", u.GetName(), rule)
				}
				if (slices.Contains(rule.Verbs, "get") || slices.Contains(rule.Verbs, "update")) && len(rule.ResourceNames) == 0 {
					t.Errorf("Role %s reads or writes any Secret by name: %+v", u.GetName(), rule)
				}
				if slices.Contains(rule.Verbs, "create") || slices.Contains(rule.Verbs, "patch") {
					t.Errorf("Role %s creates or patches Secrets: %+v", u.GetName(), rule)
				}
			}
		}
	}
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func certVolume(t *testing.T, d *appsv1.Deployment) corev1.Volume {
	t.Helper()
	dir := args(t, d)["webhook-cert-dir"]
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.MountPath == dir {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == m.Name {
					return v
				}
			}
		}
	}
	t.Fatalf("nothing is mounted at --webhook-cert-dir=%s", dir)
	return corev1.Volume{}
}

// checkConsistent checks that the names and ports the operator is told in its arguments are those of the
// objects the chart renders, whatever the values.
func checkConsistent(t *testing.T, r rendered, fullname, namespace string) {
	t.Helper()
	d := as[appsv1.Deployment](t, r.get(t, "Deployment", fullname+"-manager"))
	a := args(t, d)
	pod := d.Spec.Template.Spec
	podLabels := labels.Set(d.Spec.Template.Labels)
	for _, u := range r {
		if ns := u.GetNamespace(); ns != "" && ns != namespace && !isHook(u) {
			t.Errorf("%s %s is in namespace %s, not the release namespace %s", u.GetKind(), u.GetName(), ns, namespace)
		}
	}
	if a["leader-election-namespace"] != namespace {
		t.Errorf("--leader-election-namespace=%s, want the release namespace %s", a["leader-election-namespace"], namespace)
	}
	if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Errorf("the Deployment's selector does not match its pods")
	}
	// The webhook: Service -> container port -> --webhook-port; VWC -> Service.
	svc := as[corev1.Service](t, r.get(t, "Service", a["webhook-service-name"]))
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service %s does not select the operator pods", svc.Name)
	}
	if p := containerPort(pod.Containers[0], svc.Spec.Ports[0].TargetPort.String()); p == 0 || a["webhook-port"] != itoa(p) {
		t.Errorf("webhook Service targets port %s = %d, the operator listens on --webhook-port=%s", svc.Spec.Ports[0].TargetPort.String(), p, a["webhook-port"])
	}
	vwc := as[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.get(t, "ValidatingWebhookConfiguration", a["webhook-config-name"]))
	for _, w := range vwc.Webhooks {
		if s := w.ClientConfig.Service; s == nil || s.Name != svc.Name || s.Namespace != namespace {
			t.Errorf("webhook %s calls %+v, not Service %s/%s", w.Name, s, namespace, svc.Name)
		}
	}
	ms := as[corev1.Service](t, r.get(t, "Service", fullname+"-metrics"))
	if p := containerPort(pod.Containers[0], ms.Spec.Ports[0].TargetPort.String()); ":"+itoa(p) != a["metrics-bind-address"] {
		t.Errorf("metrics Service targets port %d, the operator binds %s", p, a["metrics-bind-address"])
	}
	if p := containerPort(pod.Containers[0], "health"); ":"+itoa(p) != a["health-probe-bind-address"] {
		t.Errorf("probes use port %d, the operator binds %s", p, a["health-probe-bind-address"])
	}
	if pdb := r.find("PodDisruptionBudget", fullname+"-manager"); pdb != nil {
		if sel := as[policyv1.PodDisruptionBudget](t, pdb).Spec.Selector; !labels.SelectorFromSet(sel.MatchLabels).Matches(podLabels) {
			t.Errorf("the PDB does not select the operator pods")
		}
	}
	// The ServiceAccount the pods run as is the one the bindings name.
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, u := range r.ofKind(kind) {
			if isHook(u) || u.GetName() == fullname+"-metrics-reader" { // the test's and Prometheus' own
				continue
			}
			subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
			s := subjects[0].(map[string]any)
			if s["name"] != pod.ServiceAccountName || s["namespace"] != namespace {
				t.Errorf("%s %s binds %v, the pods run as %s/%s", kind, u.GetName(), s, namespace, pod.ServiceAccountName)
			}
		}
	}
	// The certificate: in rotation mode the Secret exists and the operator may update it and the webhook
	// configuration by name; in cert-manager mode the Certificate writes that Secret and the pods mount it.
	secret := a["cert-secret-name"]
	role := as[rbacv1.Role](t, r.get(t, "Role", fullname+"-manager"))
	cr := as[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", fullname+"-manager"))
	if a["cert-rotation"] == "true" {
		r.get(t, "Secret", secret)
		if !grants(role.Rules, "", "secrets", "update", secret) {
			t.Errorf("Role %s cannot update the certificate Secret %s", role.Name, secret)
		}
		if !grants(cr.Rules, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", vwc.Name) {
			t.Errorf("ClusterRole %s cannot inject the caBundle into %s", cr.Name, vwc.Name)
		}
	} else {
		cert := r.get(t, "Certificate", fullname+"-webhook")
		if name, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName"); name != secret {
			t.Errorf("the Certificate writes Secret %s, the operator is told %s", name, secret)
		}
		if v := certVolume(t, d); v.Secret == nil || v.Secret.SecretName != secret {
			t.Errorf("in cert-manager mode the cert dir must mount Secret %s: %+v", secret, v.VolumeSource)
		}
		if want := namespace + "/" + cert.GetName(); vwc.Annotations["cert-manager.io/inject-ca-from"] != want {
			t.Errorf("inject-ca-from = %q, want %q", vwc.Annotations["cert-manager.io/inject-ca-from"], want)
		}
		if grants(role.Rules, "", "secrets", "get", secret) || grants(cr.Rules, "admissionregistration.k8s.io", "validatingwebhookconfigurations", "update", vwc.Name) {
			t.Errorf("in cert-manager mode the operator needs no Secret or webhook configuration access")
		}
	}
}

// grants reports whether rules allow verb on group/resource, for the object name if not empty.
func grants(rules []rbacv1.PolicyRule, group, resource, verb, name string) bool {
	for _, r := range rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

func itoa(i int32) string { return strconv.Itoa(int(i)) }
