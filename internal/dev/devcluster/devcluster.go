// Package devcluster runs a local control plane (kube-apiserver and etcd built by hack/control-plane.sh) with
// fencekit's CRDs and admission configuration installed, for `make run` and `fencekit-dev demo`.
//
// It is envtest's control plane, kept running: no container engine and no download site are needed.
package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fkscheme "github.com/fencekit/fencekit/internal/scheme"
)

// Cluster is a running local control plane.
type Cluster struct {
	env *envtest.Environment
	// Config is an admin rest.Config.
	Config *rest.Config
	// Client is an admin client.
	Client client.Client
	// Kubeconfig is the path of an admin kubeconfig file for kubectl and child processes.
	Kubeconfig string
	// WebhookHost, WebhookPort and WebhookCertDir are where the apiserver expects fencekit's webhook
	// server, when the cluster was started with webhooks.
	WebhookHost    string
	WebhookPort    int
	WebhookCertDir string
	dir            string
}

// Options configure Start.
type Options struct {
	// RepoRoot is the fencekit repository holding config/.
	RepoRoot string
	// AssetsDir holds kube-apiserver and etcd.
	AssetsDir string
	// Webhooks installs fencekit's admission: config/webhook pointed at a local webhook server, the Lease
	// policy (config/policy, waited for until enforced) and the fencekit-elector ClusterRole.
	Webhooks bool
}

// Start starts the control plane, installs the CRDs (and webhooks) and writes an admin kubeconfig.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "fencekit-devcluster-")
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: opts.AssetsDir,
		CRDDirectoryPaths:     []string{filepath.Join(opts.RepoRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                fkscheme.New(),
	}
	if opts.Webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(opts.RepoRoot, "config", "webhook")},
			LocalServingHost: "127.0.0.1",
		}
	}
	cfg, err := env.Start()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the control plane from %s: %w", opts.AssetsDir, err)
	}
	c := &Cluster{env: env, Config: cfg, dir: dir}
	if c.Client, err = client.New(cfg, client.Options{Scheme: env.Scheme}); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if err := c.writeKubeconfig(); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if opts.Webhooks {
		w := env.WebhookInstallOptions
		c.WebhookHost, c.WebhookPort, c.WebhookCertDir = w.LocalServingHost, w.LocalServingPort, w.LocalServingCertDir
		if err := InstallAdmission(ctx, opts.RepoRoot, cfg, c.Client); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) writeKubeconfig() error {
	user, err := c.env.ControlPlane.AddUser(envtest.User{Name: "fencekit-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("creating the admin user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("rendering the admin kubeconfig: %w", err)
	}
	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kubeconfig, 0o600); err != nil {
		return err
	}
	// Check that the file is usable as written.
	if _, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return fmt.Errorf("reading back %s: %w", c.Kubeconfig, err)
	}
	return nil
}

// AddUser returns a rest.Config authenticated as the given user and groups.
func (c *Cluster) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := c.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, err
	}
	return u.Config(), nil
}

// UserKubeconfig writes a kubeconfig for the given user and returns its path.
func (c *Cluster) UserKubeconfig(name string, groups ...string) (string, error) {
	u, err := c.env.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", err
	}
	b, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, "kubeconfig-"+name)
	return path, os.WriteFile(path, b, 0o600)
}

// Stop stops the control plane and removes its files.
func (c *Cluster) Stop() error {
	err := c.env.Stop()
	if rerr := os.RemoveAll(c.dir); err == nil {
		err = rerr
	}
	return err
}
