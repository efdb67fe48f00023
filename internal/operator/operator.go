// Package operator assembles the fencekit operator: a controller-runtime manager with the FencedResource
// controllers, the admission webhook, webhook certificates and leader election by pkg/elector.
// cmd/manager, the demo and the tests all start the operator through NewManager, so that what is tested is
// what ships.
package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/fencekit/fencekit/controllers"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/internal/operator/certs"
	"github.com/fencekit/fencekit/internal/operator/webhook"
	"github.com/fencekit/fencekit/internal/scheme"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/managed"
)

// LeaseName is the Lease the operator's replicas elect their leader on.
const LeaseName = "fencekit-manager"

// Options are the operator's settings; cmd/manager fills them from flags.
type Options struct {
	// MetricsAddr is the metrics endpoint's bind address; "0" disables it.
	MetricsAddr string
	// MetricsSecure serves metrics over HTTPS, only to clients that authenticate with a bearer token (a
	// TokenReview) and may get the /metrics URL (a SubjectAccessReview), as kubebuilder v4 does; false serves
	// plain HTTP to anyone who reaches the port.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for the secure metrics server (reloaded when they change);
	// empty means a self-signed certificate generated at start.
	MetricsCertDir string
	// ProbeAddr is the health and readiness probes' bind address; "0" disables them.
	ProbeAddr string
	// WebhookHost is the address the webhook server binds to (default: all interfaces).
	WebhookHost string
	// WebhookPort is the webhook server's port; 0 disables the webhook.
	WebhookPort int
	// WebhookCertDir holds tls.crt and tls.key for the webhook server.
	WebhookCertDir string
	// CertRotation makes the operator manage its own webhook CA and serving certificate in the Secret
	// CertSecretName (in Namespace) and inject the CA into the ValidatingWebhookConfiguration
	// WebhookConfigName, for the Service WebhookServiceName (no cert-manager needed).
	CertRotation                                          bool
	CertSecretName, WebhookServiceName, WebhookConfigName string
	// ObjectsWebhookConfigName is the ValidatingWebhookConfiguration the operator keeps in step with the
	// FencingPolicies (default "fencekit-objects"); its webhooks call the server that WebhookConfigName's
	// webhooks call (default "validating-webhook-configuration", the name in config/webhook), at
	// webhook.ObjectsPath.
	ObjectsWebhookConfigName string
	// LeaderElect runs the controllers only while this replica holds the LeaseName Lease in
	// LeaderElectionNamespace, elected with pkg/elector; the webhook serves on every replica.
	LeaderElect bool
	// LeaderElectionNamespace is the namespace of the operator's Lease and Secret (default: $POD_NAMESPACE).
	LeaderElectionNamespace string
	// SkipNameValidation lets several operators run in one process (tests, the demo).
	SkipNameValidation bool
	// LeaseCache is the webhooks' watch-fed copy of the fenced Leases; nil means one that watches with the
	// manager's config. Tests give one whose watch they can stall; the manager runs it either way.
	LeaseCache *webhook.LeaseCache
}

// NewManager returns a manager with fencekit's scheme, metrics, probes, webhook and controllers set up.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	if opts.LeaderElectionNamespace == "" {
		opts.LeaderElectionNamespace = os.Getenv("POD_NAMESPACE")
	}
	metrics, err := metricsOptions(opts)
	if err != nil {
		return nil, err
	}
	mopts := ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metrics,
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
			// kube-apiserver keeps its connections to a webhook alive over HTTP/1.1 too, and the call is
			// cheaper here (docs/facts.md, "What a read costs inside an admission webhook": 0.85-0.91 ms a
			// call against 1.23 ms over HTTP/2).
			TLSOpts: []func(*tls.Config){http1Only},
		})
	}
	mgr, err := ctrl.NewManager(cfg, mopts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.IndexLeaseName(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, fmt.Errorf("indexing FencedResources by lease: %w", err)
	}
	var aliases admission.Aliases
	if opts.WebhookPort != 0 {
		if aliases, err = discoverAliases(cfg); err != nil {
			return nil, err
		}
	}
	if err := setupWebhook(mgr, opts, aliases); err != nil {
		return nil, err
	}

	// Leader-only work: the controllers. With LeaderElect they are added to a Gate that runs them only
	// while this replica's elector leads; webhooks and probes keep serving on every replica.
	leaderOnly := mgr
	if opts.LeaderElect {
		gate, err := newGate(cfg, opts, mgr.GetLogger())
		if err != nil {
			return nil, err
		}
		if err := mgr.Add(gate); err != nil {
			return nil, err
		}
		leaderOnly = gate.Manager(mgr)
	}
	if err := controllers.NewFencedResourceReconciler(mgr.GetClient()).SetupWithManager(leaderOnly); err != nil {
		return nil, fmt.Errorf("setting up the FencedResource controller: %w", err)
	}
	if err := controllers.NewLeaseProtector(mgr.GetClient()).SetupWithManager(leaderOnly); err != nil {
		return nil, fmt.Errorf("setting up the Lease protector: %w", err)
	}
	if opts.WebhookPort != 0 {
		if opts.ObjectsWebhookConfigName == "" {
			opts.ObjectsWebhookConfigName = "fencekit-objects"
		}
		source := opts.WebhookConfigName
		if source == "" {
			source = "validating-webhook-configuration"
		}
		if err := controllers.NewFencingPolicyReconciler(mgr.GetClient(), opts.ObjectsWebhookConfigName, source, webhook.ObjectsPath, webhook.LeasesPath, aliases).
			SetupWithManager(leaderOnly); err != nil {
			return nil, fmt.Errorf("setting up the FencingPolicy controller: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}

// discoverAliases lists what the apiserver serves and derives the alias routes from it
// (admission.AliasesFrom): the object webhook decides a write through an alias as the route it stands for,
// and the FencingPolicy controller's webhook configuration matches it. A group that fails discovery (an
// aggregated API that is down) is left out; the core API, where the aliases are, must answer.
func discoverAliases(cfg *rest.Config) (admission.Aliases, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building a discovery client for the alias routes: %w", err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("discovering the apiserver's resources for the alias routes: %w", err)
	}
	return admission.AliasesFrom(lists), nil
}

// http1Only turns HTTP/2 off on a server fencekit serves, as kubebuilder's scaffold does, for the HTTP/2
// stream cancellation and rapid reset vulnerabilities (CVE-2023-44487, CVE-2023-39325).
func http1Only(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }

// metricsOptions are the metrics server's options: with MetricsSecure, HTTPS with controller-runtime's
// authentication and authorization filter (the operator needs to create TokenReviews and
// SubjectAccessReviews; a scraper needs get on the non-resource URL /metrics), as kubebuilder v4 scaffolds it.
func metricsOptions(opts Options) (metricsserver.Options, error) {
	m := metricsserver.Options{BindAddress: opts.MetricsAddr}
	if !opts.MetricsSecure {
		if opts.MetricsCertDir != "" {
			return m, fmt.Errorf("a metrics certificate directory (%s) is set but metrics are served as plain HTTP: enable secure metrics or drop the directory", opts.MetricsCertDir)
		}
		return m, nil
	}
	m.SecureServing = true
	m.FilterProvider = filters.WithAuthenticationAndAuthorization
	// Prometheus scrapes over HTTP/1.1.
	m.TLSOpts = []func(*tls.Config){http1Only}
	if opts.MetricsCertDir != "" {
		// controller-runtime falls back to a self-signed certificate when the files are missing: a configured
		// directory without them is a mistake to report, not to paper over.
		for _, f := range []string{"tls.crt", "tls.key"} {
			if _, err := os.Stat(filepath.Join(opts.MetricsCertDir, f)); err != nil {
				return m, fmt.Errorf("the metrics certificate directory %s: %w", opts.MetricsCertDir, err)
			}
		}
		m.CertDir = opts.MetricsCertDir
	}
	return m, nil
}

// whoAmI asks the apiserver (a SelfSubjectReview, which every authenticated user may create) which user
// the operator's client writes as: the webhook gives that user's status writes on FencedResources their
// allowance.
func whoAmI(cs kubernetes.Interface) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the apiserver which user the operator writes as (a SelfSubjectReview): %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("asking the apiserver which user the operator writes as: its SelfSubjectReview names no user")
	}
	return review.Status.UserInfo.Username, nil
}

// setupWebhook registers the FencedResource webhook and, with CertRotation, its certificate management;
// the readiness check passes once the webhook server serves with a valid certificate.
func setupWebhook(mgr manager.Manager, opts Options, aliases admission.Aliases) error {
	if opts.WebhookPort == 0 {
		return mgr.AddReadyzCheck("readyz", healthz.Ping)
	}
	// Without rotation the certificate is provided (cert-manager, envtest): ready from the start.
	var certsReady <-chan struct{}
	if opts.CertRotation {
		ready, err := certs.AddRotator(mgr, certs.Options{
			Namespace: opts.LeaderElectionNamespace, SecretName: opts.CertSecretName, ServiceName: opts.WebhookServiceName,
			WebhookConfigName: opts.WebhookConfigName, CertDir: opts.WebhookCertDir,
		})
		if err != nil {
			return err
		}
		certsReady = ready
	}
	// The webhooks' watch-fed copy of the fenced Leases: it admits writes at the current epoch to objects of
	// a kind the Lease declares fenced on acquire without a quorum read per write (webhook.LeaseCache).
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return err
	}
	self, err := whoAmI(cs)
	if err != nil {
		return err
	}
	leases := opts.LeaseCache
	if leases == nil {
		leases = webhook.NewLeaseCache(cs)
	}
	if err := mgr.Add(leases); err != nil {
		return err
	}
	if err := webhook.SetupWithManager(mgr, webhook.WithLeaseCache(leases), webhook.WithNamespaceCache(mgr.GetClient()), webhook.WithOperatorUser(self)); err != nil {
		return fmt.Errorf("setting up the FencedResource webhook: %w", err)
	}
	if err := webhook.SetupPolicyWebhookWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the FencingPolicy webhook: %w", err)
	}
	if err := webhook.SetupObjectsWithManager(mgr, aliases, webhook.WithLeaseCache(leases), webhook.WithNamespaceCache(mgr.GetClient())); err != nil {
		return fmt.Errorf("setting up the object webhook: %w", err)
	}
	if err := webhook.SetupLeasesWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Lease webhook: %w", err)
	}
	started := mgr.GetWebhookServer().StartedChecker()
	return mgr.AddReadyzCheck("webhook", func(req *http.Request) error {
		if certsReady != nil {
			select {
			case <-certsReady:
			default:
				return errors.New("the webhook certificate is not ready yet")
			}
		}
		return started(req)
	})
}

// newGate builds the operator's elector; it logs through the manager's logger (log), not klog's.
func newGate(cfg *rest.Config, opts Options, log logr.Logger) (*managed.Gate, error) {
	if opts.LeaderElectionNamespace == "" {
		return nil, errors.New("leader election needs a namespace: set --leader-election-namespace or POD_NAMESPACE")
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	gate, err := managed.NewGate(elector.Config{Client: cs, Namespace: opts.LeaderElectionNamespace, Name: LeaseName},
		elector.WithLogger(log.WithName("elector")))
	if err != nil {
		return nil, fmt.Errorf("setting up leader election: %w", err)
	}
	return gate, nil
}
