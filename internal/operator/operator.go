// Package operator assembles the fencekit operator: a controller-runtime manager with the FencedResource
// controller, the admission webhook and leader election by pkg/elector. cmd/manager, the demo and the tests
// all start the operator through NewManager, so that what is tested is what ships.
package operator

import (
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fencekit/fencekit/internal/scheme"
)

// Options are the operator's settings; cmd/manager fills them from flags.
type Options struct {
	// MetricsAddr is the metrics endpoint's bind address; "0" disables it.
	MetricsAddr string
	// ProbeAddr is the health and readiness probes' bind address; "0" disables them.
	ProbeAddr string
	// WebhookHost is the address the webhook server binds to (default: all interfaces).
	WebhookHost string
	// WebhookPort is the webhook server's port; 0 disables the webhook.
	WebhookPort int
	// WebhookCertDir holds tls.crt and tls.key for the webhook server.
	WebhookCertDir string
	// LeaderElect runs the controllers only while this replica holds the manager's Lease.
	LeaderElect bool
	// LeaderElectionNamespace is the namespace of the manager's Lease.
	LeaderElectionNamespace string
}

// NewManager returns a manager with fencekit's scheme, metrics, probes and webhook server configured.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	mopts := ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.ProbeAddr,
		// The manager's own leader election is client-go's; fencekit elects with pkg/elector instead.
		LeaderElection: false,
	}
	if opts.WebhookPort != 0 {
		mopts.WebhookServer = webhook.NewServer(webhook.Options{
			Host:    opts.WebhookHost,
			Port:    opts.WebhookPort,
			CertDir: opts.WebhookCertDir,
		})
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	return mgr, nil
}
