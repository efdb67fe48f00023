// Package operator assembles the fencekit operator: a controller-runtime manager with the FencedResource
// controller, the admission webhook and leader election by pkg/elector. cmd/manager, the demo and the tests
// all start the operator through NewManager, so that what is tested is what ships.
package operator

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/internal/scheme"
	"github.com/fencekit/fencekit/internal/webhook"
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
	// SkipNameValidation lets several operators run in one process (tests, the demo).
	SkipNameValidation bool
}

// NewManager returns a manager with fencekit's scheme, metrics, probes and webhook server configured.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	mopts := ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.ProbeAddr,
		// The manager's own leader election is client-go's; fencekit elects with pkg/elector instead.
		LeaderElection: false,
		Controller:     config.Controller{SkipNameValidation: ptr.To(opts.SkipNameValidation)},
	}
	if opts.WebhookPort != 0 {
		mopts.WebhookServer = ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host:    opts.WebhookHost,
			Port:    opts.WebhookPort,
			CertDir: opts.WebhookCertDir,
		})
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.IndexLeaseName(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("indexing FencedResources by lease: %w", err)
	}
	if opts.WebhookPort != 0 {
		if err := webhook.SetupWithManager(mgr); err != nil {
			return nil, fmt.Errorf("setting up the FencedResource webhook: %w", err)
		}
	}
	// Leader-only work: the controllers. Webhooks serve on every replica.
	leaderOnly := mgr
	if err := controllers.NewFencedResourceReconciler(leaderOnly.GetClient()).SetupWithManager(leaderOnly); err != nil {
		return nil, fmt.Errorf("setting up the FencedResource controller: %w", err)
	}
	if err := controllers.NewLeaseProtector(leaderOnly.GetClient()).SetupWithManager(leaderOnly); err != nil {
		return nil, fmt.Errorf("setting up the Lease protector: %w", err)
	}
	return mgr, nil
}
