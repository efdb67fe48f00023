package helm_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// isHook reports whether u is a Helm hook (the chart's `helm test` objects): helm install does not create it.
func isHook(u *unstructured.Unstructured) bool { return u.GetAnnotations()["helm.sh/hook"] != "" }

// standardLabels are the labels every object of the chart carries (helm.sh/chart and app.kubernetes.io/*).
var standardLabels = []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
	"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "app.kubernetes.io/component"}

// TestEveryObjectLabelled: with every toggle that adds objects, each rendered object (the copies of config/
// included: the elector ClusterRole and the Lease policy) carries the standard labels, for this release.
func TestEveryObjectLabelled(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "certManager.enabled=true,serviceMonitor.enabled=true,networkPolicy.enabled=true," +
		"serviceMonitor.prometheusServiceAccount.name=prometheus,serviceMonitor.prometheusServiceAccount.namespace=monitoring",
		"--set-json", `networkPolicy.metricsFrom=[{"namespaceSelector":{}}]`}} {
		r := objects(t, ns, args...)
		for _, u := range r {
			l := u.GetLabels()
			for _, k := range standardLabels {
				if l[k] == "" {
					t.Errorf("%s %s lacks the label %s (labels %v)", u.GetKind(), u.GetName(), k, l)
				}
			}
			if l["app.kubernetes.io/instance"] != "fencekit" || l["app.kubernetes.io/managed-by"] != "Helm" {
				t.Errorf("%s %s: labels %v do not name release fencekit managed by Helm", u.GetKind(), u.GetName(), l)
			}
		}
	}
}

// TestClusterScopedNamesPerRelease: every cluster-scoped object's name derives from the release, so that two
// releases (in one namespace or two) never write each other's objects. The CRDs are the exception: the API
// fixes their names, so one release owns them and the others set crds.enabled=false.
func TestClusterScopedNamesPerRelease(t *testing.T) {
	cluster := func(release string) map[string]bool {
		names := map[string]bool{}
		for _, u := range releaseObjects(t, release, "ns-"+release,
			"--set", "serviceMonitor.prometheusServiceAccount.name=prometheus,serviceMonitor.prometheusServiceAccount.namespace=monitoring") {
			if u.GetNamespace() == "" && !isHook(u) && u.GetKind() != "CustomResourceDefinition" {
				names[u.GetKind()+"/"+u.GetName()] = true
				if !strings.HasPrefix(u.GetName(), release+"-fencekit-") {
					t.Errorf("release %s: cluster-scoped %s %s is not named after the release", release, u.GetKind(), u.GetName())
				}
			}
		}
		return names
	}
	a, b := cluster("orders"), cluster("payments")
	for name := range a {
		if b[name] {
			t.Errorf("releases orders and payments both render %s", name)
		}
	}
	for _, want := range []string{"ValidatingAdmissionPolicy/orders-fencekit-unchecked-namespaces", "ValidatingAdmissionPolicy/orders-fencekit-fenced-leases",
		"ValidatingAdmissionPolicyBinding/orders-fencekit-fenced-leases", "ClusterRole/orders-fencekit-elector", "ClusterRole/orders-fencekit-metrics-reader"} {
		if !a[want] {
			t.Errorf("release orders does not render %s: %v", want, a)
		}
	}
}

// TestTwoReleasesInstall installs two releases side by side with helm itself: each owns its cluster-scoped
// objects (Helm refuses to install an object another release owns, so a shared name would fail here). The
// CRDs are the one thing releases share: these install with crds.enabled=false, as every release but the one
// that owns the CRDs must (TestHelmCRDUpgrade shows the refusal otherwise).
func TestTwoReleasesInstall(t *testing.T) {
	kc := kubeconfig(t, identity{})
	for _, rel := range []string{"orders", "payments"} {
		namespace := env.Namespace(t)
		if out, err := helm(t, "install", rel, chartDir, "--namespace", namespace, "--kubeconfig", kc, "--set", "crds.enabled=false"); err != nil {
			t.Fatalf("helm install %s: %v\n%s", rel, err, out)
		}
		t.Cleanup(func() { uninstall(t, rel, namespace, kc) })
	}
	// The same release name in another namespace would share the cluster-scoped names: Helm refuses it.
	other := env.Namespace(t)
	if out, err := helm(t, "install", "orders", chartDir, "--namespace", other, "--kubeconfig", kc, "--set", "crds.enabled=false"); err == nil {
		uninstall(t, "orders", other, kc)
		t.Errorf("a second release orders (in namespace %s) was installed over the first's cluster-scoped objects:\n%s", other, out)
	} else if !strings.Contains(err.Error(), "cannot be imported into the current release") {
		t.Errorf("a second release orders in another namespace: %v, want Helm's ownership refusal", err)
	}
	role := &rbacv1.ClusterRole{}
	for _, rel := range []string{"orders", "payments"} {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: rel + "-fencekit-elector"}, role); err != nil {
			t.Errorf("release %s's elector ClusterRole: %v", rel, err)
		} else if role.Labels["app.kubernetes.io/instance"] != rel || role.Annotations["meta.helm.sh/release-name"] != rel {
			t.Errorf("ClusterRole %s is not release %s's: labels %v annotations %v", role.Name, rel, role.Labels, role.Annotations)
		}
	}
}

// TestChartValues: the values a platform team sets (image digest, extra arguments and environment, security
// contexts, probe timings, plain metrics) reach the Deployment, and the defaults stay restricted.
func TestChartValues(t *testing.T) {
	t.Run("image by digest", func(t *testing.T) {
		const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		d := deployment(t, "--set", "image.tag=v9,image.digest="+digest)
		if got := d.Spec.Template.Spec.Containers[0].Image; got != "ghcr.io/fencekit/fencekit@"+digest {
			t.Errorf("image %s, want the repository by digest (the tag ignored)", got)
		}
		if _, err := template(t, ns, "--set", "image.digest=latest"); err == nil || !strings.Contains(err.Error(), "/image/digest") {
			t.Errorf("image.digest=latest: %v, want a schema error", err)
		}
	})
	t.Run("extra arguments and environment", func(t *testing.T) {
		d := deployment(t, "--set", "extraArgs={--kube-api-qps=50}", "--set-json", `extraEnv=[{"name":"GOMEMLIMIT","value":"200MiB"}]`)
		c := d.Spec.Template.Spec.Containers[0]
		if c.Args[len(c.Args)-1] != "--kube-api-qps=50" {
			t.Errorf("args %v do not end with the extra argument", c.Args)
		}
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" && e.Value == "200MiB" }) ||
			!slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAMESPACE" }) {
			t.Errorf("env %v lacks the extra variable or the chart's own", c.Env)
		}
		if _, err := template(t, ns, "--set", "extraArgs={kube-api-qps=50}"); err == nil || !strings.Contains(err.Error(), "/extraArgs/0") {
			t.Errorf("an extra argument without --: %v, want a schema error", err)
		}
	})
	t.Run("security contexts", func(t *testing.T) {
		d := deployment(t, "--set", "podSecurityContext.runAsUser=1001,securityContext.readOnlyRootFilesystem=true")
		if psc := d.Spec.Template.Spec.SecurityContext; *psc.RunAsUser != 1001 || !*psc.RunAsNonRoot || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod securityContext %+v: the override must keep the restricted defaults it does not change", psc)
		}
	})
	t.Run("probe timings", func(t *testing.T) {
		d := deployment(t, "--set", "livenessProbe.periodSeconds=7,livenessProbe.failureThreshold=5,readinessProbe.timeoutSeconds=3")
		c := d.Spec.Template.Spec.Containers[0]
		if c.LivenessProbe.PeriodSeconds != 7 || c.LivenessProbe.FailureThreshold != 5 || c.LivenessProbe.InitialDelaySeconds != 15 ||
			c.ReadinessProbe.TimeoutSeconds != 3 || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
			t.Errorf("liveness %+v readiness %+v", c.LivenessProbe, c.ReadinessProbe)
		}
		if _, err := template(t, ns, "--set", "livenessProbe.exec=true"); err == nil || !strings.Contains(err.Error(), "/livenessProbe") {
			t.Errorf("a probe field other than a timing: %v, want a schema error", err)
		}
	})
	t.Run("plain metrics", func(t *testing.T) {
		r := objects(t, ns, "--set", "metrics.secure=false,serviceMonitor.enabled=true")
		d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
		if args(t, d)["metrics-secure"] != "false" {
			t.Errorf("--metrics-secure=%s with metrics.secure=false", args(t, d)["metrics-secure"])
		}
		if r.find("ClusterRole", "fencekit-metrics-auth") != nil || r.find("ClusterRole", "fencekit-metrics-reader") != nil {
			t.Error("plain metrics need no TokenReview/SubjectAccessReview rights nor a reader role")
		}
		eps, _, _ := unstructured.NestedSlice(r.get(t, "ServiceMonitor", "fencekit-manager").Object, "spec", "endpoints")
		if ep := eps[0].(map[string]any); ep["scheme"] != "http" || ep["bearerTokenFile"] != nil {
			t.Errorf("ServiceMonitor endpoint %v, want plain http", ep)
		}
	})
	t.Run("metrics certificate from a Secret", func(t *testing.T) {
		d := deployment(t, "--set", "metrics.certSecret=fencekit-metrics-tls")
		dir := args(t, d)["metrics-cert-dir"]
		var mounted string
		for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
			if m.MountPath == dir {
				mounted = m.Name
			}
		}
		if dir == "" || !slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Name == mounted && v.Secret != nil && v.Secret.SecretName == "fencekit-metrics-tls"
		}) {
			t.Errorf("--metrics-cert-dir=%q is not the mounted Secret fencekit-metrics-tls", dir)
		}
	})
}

// TestSecureServiceMonitor: with secure metrics (the default) the ServiceMonitor scrapes over HTTPS with
// Prometheus' ServiceAccount token, and the chart binds that ServiceAccount to the metrics-reader role when
// named.
func TestSecureServiceMonitor(t *testing.T) {
	r := objects(t, ns, "--set", "serviceMonitor.enabled=true,serviceMonitor.prometheusServiceAccount.name=prometheus-k8s,serviceMonitor.prometheusServiceAccount.namespace=monitoring")
	eps, _, _ := unstructured.NestedSlice(r.get(t, "ServiceMonitor", "fencekit-manager").Object, "spec", "endpoints")
	ep := eps[0].(map[string]any)
	if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
		t.Errorf("ServiceMonitor endpoint %v, want https with Prometheus' token", ep)
	}
	if tls, _ := ep["tlsConfig"].(map[string]any); tls["insecureSkipVerify"] != any(true) {
		t.Errorf("tlsConfig %v, want insecureSkipVerify for the operator's self-signed certificate", ep["tlsConfig"])
	}
	b := as[rbacv1.ClusterRoleBinding](t, r.get(t, "ClusterRoleBinding", "fencekit-metrics-reader"))
	if b.RoleRef.Name != "fencekit-metrics-reader" || len(b.Subjects) != 1 || b.Subjects[0].Name != "prometheus-k8s" || b.Subjects[0].Namespace != "monitoring" {
		t.Errorf("metrics-reader binding %+v", b)
	}
	if _, err := template(t, ns, "--set", "serviceMonitor.prometheusServiceAccount.name=prometheus-k8s"); err == nil || !strings.Contains(err.Error(), "prometheusServiceAccount.namespace is required") {
		t.Errorf("a Prometheus ServiceAccount without namespace: %v", err)
	}
}

// TestNetworkPolicyKeepsScrapes: a NetworkPolicy that would block the ServiceMonitor's scrapes is refused at
// render time, naming the value to set.
func TestNetworkPolicyKeepsScrapes(t *testing.T) {
	_, err := template(t, ns, "--set", "networkPolicy.enabled=true,serviceMonitor.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "the NetworkPolicy would block every scrape of the ServiceMonitor; set networkPolicy.metricsFrom") {
		t.Errorf("networkPolicy with serviceMonitor and no metricsFrom: %v, want a refusal naming networkPolicy.metricsFrom", err)
	}
}

// TestMetricsRolesMatchConfig: the chart's metrics-auth and metrics-reader ClusterRoles grant what
// config/rbac's do, no more, no less.
func TestMetricsRolesMatchConfig(t *testing.T) {
	r := objects(t, ns)
	for file, name := range map[string]string{"metrics_auth_role.yaml": "fencekit-metrics-auth", "metrics_reader_role.yaml": "fencekit-metrics-reader"} {
		raw, err := os.ReadFile(filepath.Join(root, "config", "rbac", file))
		if err != nil {
			t.Fatal(err)
		}
		var want rbacv1.ClusterRole
		if err := yaml.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		got := as[rbacv1.ClusterRole](t, r.get(t, "ClusterRole", name))
		if !slices.EqualFunc(want.Rules, got.Rules, func(a, b rbacv1.PolicyRule) bool {
			return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
				slices.Equal(a.NonResourceURLs, b.NonResourceURLs) && slices.Equal(a.ResourceNames, b.ResourceNames)
		}) {
			t.Errorf("ClusterRole %s grants %+v, config/rbac/%s %+v", name, got.Rules, file, want.Rules)
		}
	}
}

// TestNotesFollowValues: NOTES.txt states the configured replica count and the release's role names.
func TestNotesFollowValues(t *testing.T) {
	for _, tc := range []struct {
		release string
		set     string
		want    []string
	}{
		{"fencekit", "replicaCount=3", []string{"3 replicas elect one leader", "--clusterrole=fencekit-elector", "helm test fencekit", "fencekit-metrics-reader",
			"Lease, FencedResource and pod in namespace default,"}},
		{"notes", "replicaCount=1,tests.namespace=checks", []string{"1 replica, which leads", "--clusterrole=notes-fencekit-elector", "in namespace checks,"}},
	} {
		// A server-side dry run: helm learns the Kubernetes version from the apiserver, creates nothing.
		out, err := helm(t, "install", tc.release, chartDir, "--dry-run=server", "--namespace", ns, "--kubeconfig", kubeconfig(t, identity{}), "--set", tc.set+",crds.enabled=false")
		if err != nil {
			t.Fatalf("helm install --dry-run: %v", err)
		}
		i := strings.Index(out, "NOTES:")
		if i < 0 {
			t.Fatalf("release %s with %s: helm printed no NOTES:\n%s", tc.release, tc.set, out)
		}
		notes := out[i:]
		for _, w := range tc.want {
			if !strings.Contains(notes, w) {
				t.Errorf("release %s with %s: the notes lack %q:\n%s", tc.release, tc.set, w, notes)
			}
		}
		if strings.Contains(notes, "2 replicas") {
			t.Errorf("release %s with %s: the notes still say 2 replicas", tc.release, tc.set)
		}
	}
}

// uninstall runs helm uninstall in a test's cleanup (the test's context is already cancelled there), and
// reports a failure: a release left behind keeps cluster-scoped objects (a fail-closed webhook) for the
// tests after it.
func uninstall(t *testing.T, release, namespace, kubeconfig string) {
	t.Helper()
	bin, err := helmBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "uninstall", release, "--namespace", namespace, "--kubeconfig", kubeconfig, "--wait=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("helm uninstall %s: %v\n%s", release, err, out)
	}
}

func deployment(t *testing.T, args ...string) *appsv1.Deployment {
	t.Helper()
	r := objects(t, ns, args...)
	checkConsistent(t, r, "fencekit", ns)
	return as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
}
