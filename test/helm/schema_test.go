package helm_test

import (
	"strings"
	"testing"
)

// TestValuesRejected: values.schema.json (and the chart's own checks) refuse wrong types and out-of-range
// values at install time, with a message that names the value and what is wanted.
func TestValuesRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"replicas not a number", []string{"--set", "replicaCount=two"}, "at '/replicaCount': got string, want integer"},
		{"zero replicas", []string{"--set", "replicaCount=0"}, "at '/replicaCount': minimum: got 0, want 1"},
		{"webhook timeout above the apiserver's 30 s", []string{"--set", "webhook.timeoutSeconds=60"}, "at '/webhook/timeoutSeconds': maximum: got 60, want 30"},
		{"webhook timeout zero", []string{"--set", "webhook.timeoutSeconds=0"}, "at '/webhook/timeoutSeconds': minimum: got 0, want 1"},
		{"privileged webhook port for a non-root operator", []string{"--set", "webhook.port=443"}, "at '/webhook/port': minimum: got 443, want 1,024"},
		{"metrics port out of range", []string{"--set", "metrics.port=70000"}, "at '/metrics/port': maximum: got 70,000, want 65,535"},
		{"boolean as a string", []string{"--set-string", "certManager.enabled=yes"}, "at '/certManager/enabled': got string, want boolean"},
		{"unknown log level", []string{"--set", "logLevel=verbose"}, "at '/logLevel': value must be one of 'debug', 'info', 'error'"},
		{"unknown pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, "at '/image/pullPolicy': value must be one of 'Always', 'IfNotPresent', 'Never'"},
		{"a misspelt value", []string{"--set", "replicas=3"}, "at '': additional properties 'replicas' not allowed"},
		{"a misspelt nested value", []string{"--set", "certManager.enable=true"}, "at '/certManager': additional properties 'enable' not allowed"},
		{"issuer kind", []string{"--set", "certManager.issuerRef.kind=Vault"}, "at '/certManager/issuerRef/kind': value must be one of 'Issuer', 'ClusterIssuer'"},
		{"a duration in days", []string{"--set", "certManager.duration=90d"}, "at '/certManager/duration': '90d' does not match pattern"},
		{"an invalid namespace name", []string{"--set", "webhook.excludeNamespaces={Team_A}"}, "at '/webhook/excludeNamespaces/0': 'Team_A' does not match pattern"},
		{"labels that are not strings", []string{"--set-json", `podLabels={"tier":1}`}, "at '/podLabels/tier': got number, want string"},
		{"a PDB that blocks every drain", []string{"--set", "replicaCount=2,podDisruptionBudget.minAvailable=2"},
			"podDisruptionBudget.minAvailable (2) must be below replicaCount (2), or no node could ever be drained"},
		{"an existing ServiceAccount without its name", []string{"--set", "serviceAccount.create=false"},
			"serviceAccount.name is required when serviceAccount.create is false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := template(t, ns, tc.set...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want an error containing %q", tc.set, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %v:\n%v\nwant a message containing %q", tc.set, err, tc.want)
			}
		})
	}
}
