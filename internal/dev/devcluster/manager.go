package devcluster

import "strconv"

// WebhookConfigName is the ValidatingWebhookConfiguration the local control plane installs from
// config/webhook. The manager's --webhook-config-name defaults to the Helm chart's name
// (fencekit-validating-webhook): a manager run against this cluster must be told this one, or it finds no
// webhook address to copy and every FencingPolicy stays Ready=False WebhookNotConfigured.
const WebhookConfigName = "validating-webhook-configuration"

// ManagerArgs are the flags that run fencekit's manager (cmd/manager) against the cluster: its admin
// kubeconfig, the webhook server where the apiserver expects it (the cluster must have been started with
// Webhooks), the webhook configuration the cluster installed, no metrics or probe listeners, and leader
// election in namespace default.
func (c *Cluster) ManagerArgs() []string {
	return []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=0",
		"--webhook-host=" + c.WebhookHost,
		"--webhook-port=" + strconv.Itoa(c.WebhookPort),
		"--webhook-cert-dir=" + c.WebhookCertDir,
		"--webhook-config-name=" + WebhookConfigName,
		"--leader-election-namespace=default",
	}
}
