package helm_test

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// TestTemplateToggles renders the chart with each value that changes which objects exist or how they are
// wired, and checks the objects a user would rely on.
func TestTemplateToggles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		release  string // default "fencekit"
		fullname string // default "fencekit"
		args     []string
		check    func(t *testing.T, r rendered)
	}{{
		name: "cert-manager with a self-signed issuer",
		args: []string{"--set", "certManager.enabled=true"},
		check: func(t *testing.T, r rendered) {
			d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
			if args(t, d)["cert-rotation"] != "false" {
				t.Error("the operator still rotates its own certificate although cert-manager issues it")
			}
			issuer := r.get(t, "Issuer", "fencekit-selfsigned")
			if _, ok, _ := unstructured.NestedMap(issuer.Object, "spec", "selfSigned"); !ok {
				t.Errorf("Issuer is not self-signed: %v", issuer.Object["spec"])
			}
			cert := r.get(t, "Certificate", "fencekit-webhook")
			dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			if !slices.Contains(dns, "fencekit-webhook."+ns+".svc") {
				t.Errorf("Certificate dnsNames %v lack the Service name the apiserver dials", dns)
			}
			if kind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name"); kind != "fencekit-selfsigned" {
				t.Errorf("Certificate issued by %q, want the chart's Issuer", kind)
			}
			if len(r.ofKind("Secret")) != 0 {
				t.Errorf("the chart creates a Secret (%v) although cert-manager writes the certificate's", r.ofKind("Secret").names())
			}
		},
	}, {
		name: "cert-manager with your ClusterIssuer",
		args: []string{"--set", "certManager.enabled=true,certManager.issuerRef.name=corp-ca,certManager.issuerRef.kind=ClusterIssuer"},
		check: func(t *testing.T, r rendered) {
			if len(r.ofKind("Issuer")) != 0 {
				t.Error("a self-signed Issuer is created although an issuer was given")
			}
			cert := r.get(t, "Certificate", "fencekit-webhook")
			ref, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
			if ref["name"] != "corp-ca" || ref["kind"] != "ClusterIssuer" {
				t.Errorf("issuerRef = %v, want ClusterIssuer corp-ca", ref)
			}
		},
	}, {
		name: "ServiceMonitor",
		args: []string{"--set", "serviceMonitor.enabled=true,serviceMonitor.labels.release=prom"},
		check: func(t *testing.T, r rendered) {
			sm := r.get(t, "ServiceMonitor", "fencekit-manager")
			if sm.GetLabels()["release"] != "prom" {
				t.Errorf("ServiceMonitor labels %v lack release=prom", sm.GetLabels())
			}
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			svc := r.get(t, "Service", "fencekit-metrics")
			if !labels.SelectorFromSet(sel).Matches(labels.Set(svc.GetLabels())) || labels.SelectorFromSet(sel).Matches(labels.Set(r.get(t, "Service", "fencekit-webhook").GetLabels())) {
				t.Errorf("ServiceMonitor selector %v must select the metrics Service and only it", sel)
			}
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(eps) != 1 || eps[0].(map[string]any)["port"] != "metrics" {
				t.Errorf("ServiceMonitor endpoints %v, want port metrics", eps)
			}
		},
	}, {
		name: "NetworkPolicy",
		args: []string{"--set", "networkPolicy.enabled=true", "--set-json",
			`networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]`},
		check: func(t *testing.T, r rendered) {
			np := as[networkingv1.NetworkPolicy](t, r.get(t, "NetworkPolicy", "fencekit-manager"))
			d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
			sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
			if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Error("the NetworkPolicy does not select the operator pods")
			}
			open := map[int32]int{} // port -> number of peers (0: anyone)
			for _, in := range np.Spec.Ingress {
				for _, p := range in.Ports {
					open[p.Port.IntVal] = len(in.From)
				}
			}
			if n, ok := open[9443]; !ok || n != 0 {
				t.Errorf("webhook port 9443 must be open to the apiserver (any source): %v", open)
			}
			if n, ok := open[8443]; !ok || n != 1 {
				t.Errorf("metrics port 8443 must be open only to networkPolicy.metricsFrom: %v", open)
			}
		},
	}, {
		name: "a single replica has no PDB (it could never be drained)",
		args: []string{"--set", "replicaCount=1"},
		check: func(t *testing.T, r rendered) {
			if len(r.ofKind("PodDisruptionBudget")) != 0 {
				t.Error("PDB rendered for one replica")
			}
		},
	}, {
		name: "three replicas",
		args: []string{"--set", "replicaCount=3,podDisruptionBudget.minAvailable=2"},
		check: func(t *testing.T, r rendered) {
			d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
			if *d.Spec.Replicas != 3 {
				t.Errorf("replicas = %d", *d.Spec.Replicas)
			}
			if v := as[policyv1.PodDisruptionBudget](t, r.get(t, "PodDisruptionBudget", "fencekit-manager")).Spec.MinAvailable; v.IntValue() != 2 {
				t.Errorf("PDB minAvailable = %v, want 2", v)
			}
		},
	}, {
		name: "no Lease policy, no elector role",
		args: []string{"--set", "leasePolicy=false,rbac.createElectorRole=false"},
		check: func(t *testing.T, r rendered) {
			for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
				if r.find(kind, "fencekit-fenced-leases") != nil {
					t.Errorf("%s rendered with leasePolicy=false", kind)
				}
			}
			if r.find("ClusterRole", "fencekit-elector") != nil {
				t.Error("fencekit-elector rendered with rbac.createElectorRole=false")
			}
		},
	}, {
		name: "more namespaces excluded from the webhook",
		args: []string{"--set", "webhook.excludeNamespaces={team-a,kube-system},webhook.timeoutSeconds=10"},
		check: func(t *testing.T, r rendered) {
			vwc := as[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.get(t, "ValidatingWebhookConfiguration", "fencekit-validating-webhook"))
			w := vwc.Webhooks[0]
			if got, want := w.NamespaceSelector.MatchExpressions[0].Values, []string{ns, "kube-system", "team-a"}; !slices.Equal(got, want) {
				t.Errorf("excluded namespaces %v, want %v", got, want)
			}
			if *w.TimeoutSeconds != 10 {
				t.Errorf("timeoutSeconds = %d, want 10", *w.TimeoutSeconds)
			}
		},
	}, {
		name: "an existing ServiceAccount",
		args: []string{"--set", "serviceAccount.create=false,serviceAccount.name=platform-fencekit"},
		check: func(t *testing.T, r rendered) {
			if sas := r.ofKind("ServiceAccount"); slices.ContainsFunc(sas, func(u *unstructured.Unstructured) bool { return !isHook(u) }) {
				t.Errorf("a ServiceAccount is created with serviceAccount.create=false: %v", sas.names())
			}
			d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
			if d.Spec.Template.Spec.ServiceAccountName != "platform-fencekit" {
				t.Errorf("pods run as %s", d.Spec.Template.Spec.ServiceAccountName)
			}
		},
	}, {
		name:     "another release name",
		release:  "payments",
		fullname: "payments-fencekit",
		check: func(t *testing.T, r rendered) {
			for _, want := range []string{"ValidatingWebhookConfiguration/payments-fencekit-validating-webhook", "Secret/payments-fencekit-webhook-cert", "ClusterRole/payments-fencekit-manager"} {
				if !slices.Contains(r.names(), want) {
					t.Errorf("%s not rendered: %v", want, r.names())
				}
			}
		},
	}, {
		name: "image, log level, scheduling",
		args: []string{"--set", "image.repository=registry.example/fencekit,image.tag=v9,logLevel=debug,priorityClassName=system-cluster-critical",
			"--set-json", `affinity={"nodeAffinity":{}}`},
		check: func(t *testing.T, r rendered) {
			d := as[appsv1.Deployment](t, r.get(t, "Deployment", "fencekit-manager"))
			c := d.Spec.Template.Spec.Containers[0]
			if c.Image != "registry.example/fencekit:v9" || args(t, d)["zap-log-level"] != "debug" ||
				d.Spec.Template.Spec.PriorityClassName != "system-cluster-critical" || d.Spec.Template.Spec.Affinity.NodeAffinity == nil ||
				d.Spec.Template.Spec.Affinity.PodAntiAffinity != nil {
				t.Errorf("image %s, args %v, priority %q, affinity %+v", c.Image, c.Args, d.Spec.Template.Spec.PriorityClassName, d.Spec.Template.Spec.Affinity)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			release, fullname := "fencekit", "fencekit"
			if tc.release != "" {
				release, fullname = tc.release, tc.fullname
			}
			r := releaseObjects(t, release, ns, tc.args...)
			checkConsistent(t, r, fullname, ns)
			checkLeastPrivilege(t, r)
			tc.check(t, r)
		})
	}
}
