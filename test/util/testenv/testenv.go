package testenv

import (
	"context"

	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-logr/logr"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fencekit/fencekit/internal/dev/devcluster"
	fkscheme "github.com/fencekit/fencekit/internal/scheme"
)

// Env is a running control plane with fencekit's CRDs installed.
type Env struct {
	// Environment is the underlying envtest environment; its WebhookInstallOptions hold the host, port and
	// certificate directory a webhook server must use when WithWebhooks was given.
	Environment *envtest.Environment
	// Config is an admin (system:masters) rest.Config for the control plane.
	Config *rest.Config
	// Scheme knows client-go's built-in types and fencekit's API.
	Scheme *k8sruntime.Scheme
	// Client is an admin client (no cache).
	Client client.Client

	unthrottledUsers bool
}

type options struct {
	webhooks      bool
	leasePolicy   bool
	apiServerArgs map[string]string
	unthrottled   bool
}

// Option configures Start.
type Option func(*options)

// WithWebhooks installs the webhook configurations from config/webhook, pointed at the test process.
func WithWebhooks() Option { return func(o *options) { o.webhooks = true } }

// WithLeasePolicy installs fencekit's ValidatingAdmissionPolicy on fenced Leases (config/policy) and the
// fencekit-elector ClusterRole (config/rbac/elector_role.yaml), and waits until the policy is enforced.
func WithLeasePolicy() Option { return func(o *options) { o.leasePolicy = true } }

// WithUnthrottledUsers gives the clients of added users (UserClient, ClientAs, ElectorClient, NewWorker) no
// client-side rate limit, as Config has none to speak of: for a suite whose tests measure what the
// apiserver and its admission answer, where client-go's default limiter (5 requests per second, bursts of
// 10) would only add waiting. A test that wants that limiter builds it (LimitedConfig).
func WithUnthrottledUsers() Option { return func(o *options) { o.unthrottled = true } }

// WithAPIServerArg sets a kube-apiserver flag.
func WithAPIServerArg(name, value string) Option {
	return func(o *options) {
		if o.apiServerArgs == nil {
			o.apiServerArgs = map[string]string{}
		}
		o.apiServerArgs[name] = value
	}
}

// RepoRoot is the absolute path of the fencekit repository.
func RepoRoot() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("testenv: cannot locate the repository")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Start starts a control plane and installs fencekit's CRDs.
func Start(opts ...Option) (*Env, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	root := RepoRoot()
	assets, err := devcluster.AssetsDir(root, true)
	if err != nil {
		return nil, err
	}
	// Child processes of the tests (the e2e workers) find the binaries the same way.
	if err := os.Setenv("KUBEBUILDER_ASSETS", assets); err != nil {
		return nil, err
	}
	scheme := fkscheme.New()
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	if o.webhooks {
		port, err := PickServerPort()
		if err != nil {
			return nil, fmt.Errorf("picking the webhook server's port: %w", err)
		}
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths:            []string{filepath.Join(root, "config", "webhook")},
			LocalServingHost: "127.0.0.1", LocalServingPort: port,
		}
	}
	apiServer := env.ControlPlane.GetAPIServer()
	for name, value := range o.apiServerArgs {
		apiServer.Configure().Set(name, value)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting the control plane from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("creating the admin client: %w", err)
	}
	e := &Env{Environment: env, Config: cfg, Scheme: scheme, Client: c, unthrottledUsers: o.unthrottled}
	if o.leasePolicy {
		if err := devcluster.InstallAdmission(context.Background(), root, cfg, c); err != nil {
			_ = env.Stop()
			return nil, err
		}
	}
	return e, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.Environment.Stop() }

// Main runs a test package's tests on one control plane: call it from TestMain, and read the environment
// through the pointer once the tests run.
//
//	var env *testenv.Env
//	func TestMain(m *testing.M) { testenv.Main(m, &env) }
func Main(m *testing.M, env **Env, opts ...Option) {
	// controller-runtime's logs (the operator in process) only when asked: they drown test output.
	if os.Getenv("FENCEKIT_TEST_LOGS") == "" {
		ctrllog.SetLogger(logr.Discard())
	} else {
		ctrllog.SetLogger(zap.New(zap.UseDevMode(true)))
	}
	e, err := Start(opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	if err := e.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping the control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// LimitedConfig is a copy of cfg with client-go's default client-side rate limit (rest.DefaultQPS requests
// per second, bursts of rest.DefaultBurst): what a client built without limits of its own sends at.
func LimitedConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = rest.DefaultQPS, rest.DefaultBurst, nil
	return c
}

// UserClient returns a client authenticated as the given user name and groups, for identity and RBAC tests.
func (e *Env) UserClient(name string, groups ...string) (client.Client, *rest.Config, error) {
	user, err := e.Environment.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("adding user %q: %w", name, err)
	}
	cfg := user.Config()
	if e.unthrottledUsers {
		cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		return nil, nil, err
	}
	return c, cfg, nil
}

// ClientAs is UserClient for a test: a client authenticated as user name and groups, failing t if the
// user cannot be added.
func (e *Env) ClientAs(t testing.TB, name string, groups ...string) client.Client {
	t.Helper()
	c, _, err := e.UserClient(name, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Read reads the object namespace/name of type T with c, failing t if it cannot.
func Read[T any, PT interface {
	*T
	client.Object
}](t testing.TB, c client.Reader, namespace, name string) PT {
	t.Helper()
	obj := PT(new(T))
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
		t.Fatalf("reading %T %s/%s: %v", obj, namespace, name, err)
	}
	return obj
}

// ElectorClient returns a client authenticated as user name, bound to the fencekit-elector ClusterRole in
// namespace (requires WithLeasePolicy, which installs the role).
func (e *Env) ElectorClient(t testing.TB, namespace, name string) (client.Client, *rest.Config) {
	t.Helper()
	if err := devcluster.BindElector(t.Context(), e.Client, namespace, name); err != nil {
		t.Fatal(err)
	}
	c, cfg, err := e.UserClient(name)
	if err != nil {
		t.Fatal(err)
	}
	return c, cfg
}

// ServiceAccountToken creates ServiceAccount namespace/name and returns a token the apiserver issued for it
// (TokenRequest, valid ten minutes), as the kubelet mounts into a pod running as it.
func (e *Env) ServiceAccountToken(t testing.TB, namespace, name string) string {
	t.Helper()
	if err := e.Client.Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}); err != nil {
		t.Fatalf("creating ServiceAccount %s/%s: %v", namespace, name, err)
	}
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(t.Context(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// Namespace creates a fresh namespace for one test and returns its name.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{}
	ns.GenerateName = "fencekit-test-"
	if err := e.Client.Create(t.Context(), ns); err != nil {
		t.Fatalf("creating a test namespace: %v", err)
	}
	return ns.Name
}
