package operator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/yaml"

	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestSecureMetrics: by default (cmd/manager's --metrics-secure=true) the operator serves its metrics over
// HTTPS and only to callers the apiserver authenticates (TokenReview of the bearer token) and authorizes to
// get /metrics (SubjectAccessReview): no token is refused with 401, a valid ServiceAccount token without
// the metrics-reader role with 403, and the same kind of token bound to config/rbac's metrics-reader role
// reads fencekit's metrics.
func TestSecureMetrics(t *testing.T) {
	ns := env.Namespace(t)
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	operatortest.Start(t, env, func(o *operator.Options) {
		o.MetricsAddr, o.MetricsSecure = addr, true
		// The elector registers fencekit's elector metrics, so that the body has fencekit_ series to show.
		o.LeaderElect, o.LeaderElectionNamespace = true, ns
	})
	url := "https://" + addr + "/metrics"
	// The certificate is controller-runtime's self-signed one: the scraper cannot verify it (the chart's
	// ServiceMonitor sets insecureSkipVerify unless given a CA), but the traffic is encrypted.
	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	waitServing(t, insecure, url)

	t.Run("plain HTTP is not served", func(t *testing.T) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatal("the secure metrics port answers plain HTTP with 200")
			}
		}
	})
	t.Run("no token", func(t *testing.T) {
		if code, body := scrape(t, insecure, url, ""); code != http.StatusUnauthorized || strings.Contains(body, "fencekit_") {
			t.Errorf("a scrape without a token: %d %q, want 401 and no metrics", code, short(body))
		}
	})
	t.Run("a token the apiserver does not know", func(t *testing.T) {
		// controller-runtime's filter answers an invalid bearer token with 500 "Authentication failed" (the
		// authenticator reports it as an error, not as "unauthenticated"): refused either way.
		code, body := scrape(t, insecure, url, "not-a-token")
		if code == http.StatusOK || strings.Contains(body, "fencekit_") {
			t.Errorf("a scrape with a made-up token: %d %q, want a refusal", code, short(body))
		}
		t.Logf("a made-up token: %d %q", code, short(body))
	})
	t.Run("a ServiceAccount without metrics-reader", func(t *testing.T) {
		token := env.ServiceAccountToken(t, ns, "nosy")
		if code, body := scrape(t, insecure, url, token); code != http.StatusForbidden || strings.Contains(body, "fencekit_") {
			t.Errorf("a scrape by a ServiceAccount without metrics-reader: %d %q, want 403 and no metrics", code, short(body))
		}
	})
	t.Run("a ServiceAccount bound to metrics-reader", func(t *testing.T) {
		token := env.ServiceAccountToken(t, ns, "prometheus")
		bindMetricsReader(t, ns, "prometheus")
		code, body := scrape(t, insecure, url, token)
		if code != http.StatusOK {
			t.Fatalf("a scrape by a ServiceAccount bound to metrics-reader: %d %q, want 200", code, short(body))
		}
		// The elector's series appear once the operator has elected itself.
		testenv.Eventually(t, "the operator's metrics to show its election", func() (bool, string) {
			code, body = scrape(t, insecure, url, token)
			return code == http.StatusOK && strings.Contains(body, "fencekit_elector_is_leader") && strings.Contains(body, "controller_runtime_"), strconv.Itoa(code)
		})
	})
}

// TestSecureMetricsCertDir: with --metrics-cert-dir the metrics server presents that certificate, so that a
// scraper can verify it with its CA; a directory without the files is refused at start (controller-runtime
// would silently fall back to a self-signed certificate).
func TestSecureMetricsCertDir(t *testing.T) {
	dir := t.TempDir()
	cert, key, err := certutil.GenerateSelfSignedCertKey("fencekit-metrics.fencekit-system.svc", []net.IP{{127, 0, 0, 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	operatortest.Start(t, env, func(o *operator.Options) { o.MetricsAddr, o.MetricsSecure, o.MetricsCertDir = addr, true, dir })
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cert) {
		t.Fatal("the test certificate does not parse")
	}
	verified := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	// A verified TLS handshake with the given certificate: the filter then asks for a token.
	waitServing(t, verified, "https://"+addr+"/metrics")
	if code, _ := scrape(t, verified, "https://"+addr+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("a verified scrape without a token: %d, want 401", code)
	}

	_, err = operator.NewManager(env.Config, operator.Options{
		MetricsAddr: "127.0.0.1:0", MetricsSecure: true, MetricsCertDir: t.TempDir(), ProbeAddr: "0", SkipNameValidation: true,
	})
	if err == nil || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("an empty metrics certificate directory: got %v, want an error naming tls.crt", err)
	}
	_, err = operator.NewManager(env.Config, operator.Options{MetricsAddr: "127.0.0.1:0", MetricsCertDir: dir, ProbeAddr: "0", SkipNameValidation: true})
	if err == nil || !strings.Contains(err.Error(), "plain HTTP") {
		t.Errorf("a metrics certificate directory with plain HTTP metrics: got %v, want an error", err)
	}
}

// TestPlainMetrics: --metrics-secure=false serves plain HTTP to anyone, as an explicit choice.
func TestPlainMetrics(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	operatortest.Start(t, env, func(o *operator.Options) { o.MetricsAddr, o.MetricsSecure = addr, false })
	c := &http.Client{Timeout: 10 * time.Second}
	waitServing(t, c, "http://"+addr+"/metrics")
	if code, body := scrape(t, c, "http://"+addr+"/metrics", ""); code != http.StatusOK || !strings.Contains(body, "controller_runtime_") {
		t.Errorf("plain metrics without a token: %d, want 200 with metrics", code)
	}
}

// short bounds a response body for a test message.
func short(body string) string {
	if len(body) > 200 {
		return body[:200] + "..."
	}
	return body
}

// waitServing waits until the metrics server answers at all (any HTTP status).
func waitServing(t *testing.T, c *http.Client, url string) {
	t.Helper()
	testenv.Eventually(t, "the metrics server to serve "+url, func() (bool, string) {
		resp, err := c.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	})
}

// scrape GETs url with the bearer token (none if empty) and returns the status code and body.
func scrape(t *testing.T, c *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// bindMetricsReader installs config/rbac's metrics-reader ClusterRole (under a name unique to the test) and
// binds it to ServiceAccount ns/name, waiting until the authorizer applies the binding.
func bindMetricsReader(t *testing.T, ns, name string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &role); err != nil {
		t.Fatal(err)
	}
	role.Name = ns + "-" + role.Name
	if err := env.Client.Create(t.Context(), &role); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if err := env.Client.Create(t.Context(), binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), binding)
		_ = env.Client.Delete(context.Background(), &role)
	})
	user := "system:serviceaccount:" + ns + ":" + name
	testenv.Eventually(t, "the metrics-reader binding of "+user+" to apply", func() (bool, string) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
		}}
		if err := env.Client.Create(t.Context(), sar); err != nil {
			return false, err.Error()
		}
		return sar.Status.Allowed, sar.Status.Reason
	})
}
