// Command manager is the fencekit operator: it keeps FencedResource status, protects bound Leases and serves
// the FencedResource admission webhook. It only wires flags, the manager and signals; the logic lives in
// controllers/ and pkg/.
package main

import (
	"flag"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/internal/version"
)

func main() {
	var opts operator.Options
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8443", "The address the metrics endpoint binds to; \"0\" disables it.")
	flag.BoolVar(&opts.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, only to callers whose bearer token the apiserver authenticates and authorizes to get /metrics; false serves plain HTTP to anyone.")
	flag.StringVar(&opts.MetricsCertDir, "metrics-cert-dir", "", "The directory holding tls.crt and tls.key for the secure metrics server (reloaded on change); empty means a self-signed certificate.")
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "The address the health and readiness probes bind to.")
	flag.IntVar(&opts.WebhookPort, "webhook-port", 9443, "The port the admission webhook server listens on; 0 disables the webhook server.")
	flag.StringVar(&opts.WebhookHost, "webhook-host", "", "The address the webhook server binds to (default: all interfaces).")
	flag.StringVar(&opts.WebhookCertDir, "webhook-cert-dir", "", "The directory holding tls.crt and tls.key for the webhook server (default: controller-runtime's).")
	flag.BoolVar(&opts.CertRotation, "cert-rotation", false, "Manage the webhook's CA and serving certificate in a Secret and inject the CA into the webhook configuration (without cert-manager).")
	flag.StringVar(&opts.CertSecretName, "cert-secret-name", "fencekit-webhook-cert", "The Secret holding the webhook CA and serving certificate (with --cert-rotation).")
	flag.StringVar(&opts.WebhookServiceName, "webhook-service-name", "fencekit-webhook", "The webhook Service, whose DNS name the serving certificate is for (with --cert-rotation).")
	flag.StringVar(&opts.WebhookConfigName, "webhook-config-name", "fencekit-validating-webhook", "The ValidatingWebhookConfiguration whose caBundle is injected (with --cert-rotation), and whose address and CA the object webhooks copy.")
	flag.StringVar(&opts.ObjectsWebhookConfigName, "objects-webhook-config-name", "fencekit-objects", "The ValidatingWebhookConfiguration the operator keeps in step with the FencingPolicies (one webhook per namespace).")
	flag.BoolVar(&opts.LeaderElect, "leader-elect", true, "Run the controllers only on the replica that holds the fencekit-manager Lease (elected with pkg/elector); webhooks serve on every replica.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "The namespace of the manager's Lease (default: the pod's namespace, from POD_NAMESPACE).")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	log.Info("starting fencekit manager", "version", version.Version, "commit", version.Commit)

	mgr, err := operator.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		log.Error(err, "unable to set up the manager")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
