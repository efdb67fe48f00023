package helm_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestChartSecureMetrics runs the operator as the chart's ServiceAccount, with only the chart's permissions
// and its metrics arguments, and scrapes it as Prometheus would: the ServiceAccount the chart binds to
// <fullname>-metrics-reader (serviceMonitor.prometheusServiceAccount) reads the metrics, another
// ServiceAccount is refused with 403, no token with 401; and without the chart's metrics-auth binding the
// operator cannot review tokens and admits no one.
func TestChartSecureMetrics(t *testing.T) {
	release := env.Namespace(t)
	monitoring := env.Namespace(t)
	r := releaseObjects(t, "metrics", release,
		"--set", "serviceMonitor.prometheusServiceAccount.name=prometheus,serviceMonitor.prometheusServiceAccount.namespace="+monitoring)
	applyKinds(t, r, rbacKinds)
	prometheus, nosy := env.ServiceAccountToken(t, monitoring, "prometheus"), env.ServiceAccountToken(t, monitoring, "nosy")
	waitFor(t, "the metrics-reader binding to take effect", func(context.Context) (bool, error) {
		return allowedURL(t, serviceAccount(monitoring, "prometheus"), "/metrics"), nil
	})

	opts := operatorOptions(t, r, release)
	a := args(t, as[appsv1.Deployment](t, r.get(t, "Deployment", "metrics-fencekit-manager")))
	if a["metrics-secure"] != "true" {
		t.Fatalf("the chart's default --metrics-secure=%q", a["metrics-secure"])
	}
	opts.MetricsSecure, opts.MetricsAddr = true, "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t))
	opts.WebhookPort, opts.CertRotation, opts.ProbeAddr = 0, false, "0" // metrics only
	stop := run(t, serviceAccount(release, "metrics-fencekit-manager"), opts)
	defer stop()
	url := "https://" + opts.MetricsAddr + "/metrics"
	waitFor(t, "the secure metrics server", func(ctx context.Context) (bool, error) {
		_, _, err := get(ctx, url, "")
		return err == nil, err
	})
	for _, tc := range []struct {
		who   string
		token string
		want  int
	}{{"no token", "", http.StatusUnauthorized}, {"a ServiceAccount without metrics-reader", nosy, http.StatusForbidden}, {"Prometheus' ServiceAccount", prometheus, http.StatusOK}} {
		code, body, err := get(t.Context(), url, tc.token)
		if err != nil || code != tc.want || (code == http.StatusOK) != strings.Contains(body, "controller_runtime_") {
			t.Errorf("%s: %d (%v), want %d", tc.who, code, err, tc.want)
		}
	}
	stop()

	// Without the chart's metrics-auth binding the operator may not create TokenReviews: nobody is admitted.
	if err := env.Client.Delete(t.Context(), r.get(t, "ClusterRoleBinding", "metrics-fencekit-metrics-auth").DeepCopy()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the metrics-auth binding to be gone", func(context.Context) (bool, error) {
		return !allowed(t, serviceAccount(release, "metrics-fencekit-manager"), access{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews"}), nil
	})
	opts.MetricsAddr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	defer run(t, serviceAccount(release, "metrics-fencekit-manager"), opts)()
	url = "https://" + opts.MetricsAddr + "/metrics"
	waitFor(t, "the secure metrics server", func(ctx context.Context) (bool, error) {
		_, _, err := get(ctx, url, "")
		return err == nil, err
	})
	if code, _, err := get(t.Context(), url, prometheus); err != nil || code == http.StatusOK {
		t.Errorf("Prometheus' scrape with the operator unable to review tokens: %d (%v), want a refusal", code, err)
	}
}

// run starts the operator as id with opts until stop is called (or the test ends).
func run(t *testing.T, id identity, opts operator.Options) (stop func()) {
	t.Helper()
	mgr, err := operator.NewManager(id.config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("operator: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// get scrapes url with the bearer token (none if empty), skipping verification of the operator's
// self-signed certificate as the chart's ServiceMonitor does by default.
func get(ctx context.Context, url, token string) (int, string, error) {
	return scrape(ctx, http.MethodGet, url, token)
}

// scrape is get with any HTTP method.
func scrape(ctx context.Context, method, url, token string) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// allowedURL asks the apiserver's authorizer whether id may get the non-resource URL path.
func allowedURL(t *testing.T, id identity, path string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: id.user, Groups: id.groups, NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}
	if err := env.Client.Create(t.Context(), sar); err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return sar.Status.Allowed
}
