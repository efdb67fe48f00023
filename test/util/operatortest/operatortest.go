// Package operatortest runs fencekit's operator in a test process, on a control plane started by
// test/util/testenv. It is on the operator's side of the import rules (docs/design/imports.md): only the tests of
// the operator, its reconcilers (controllers) and the end-to-end suites use it; the public packages' tests use
// test/util/testenv alone.
package operatortest

import (
	"testing"

	"k8s.io/client-go/rest"

	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// Start runs fencekit's operator (webhook and controllers, no leader election unless change says so) with
// operator.Start until the test ends or stop is called; env must have been started WithWebhooks, unless
// change sets WebhookPort to 0 (controllers only). It may be started again after a stop.
func Start(t testing.TB, env *testenv.Env, change ...func(*operator.Options)) (stop func()) {
	t.Helper()
	return StartWith(t, env.Config, Options(env, change...))
}

// Options are the options Start runs the operator with on env: webhooks served where env's apiserver
// calls them, metrics and probes on ports of their own, no leader election; then each change applied. For
// StartWith with a client configuration of the test's own.
func Options(env *testenv.Env, change ...func(*operator.Options)) operator.Options {
	w := env.Environment.WebhookInstallOptions
	opts := operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: w.LocalServingHost, WebhookPort: w.LocalServingPort, WebhookCertDir: w.LocalServingCertDir,
		// The configuration envtest installs from config/webhook.
		WebhookConfigName:  "validating-webhook-configuration",
		SkipNameValidation: true,
	}
	for _, c := range change {
		c(&opts)
	}
	return opts
}

// StartWith runs fencekit's operator with opts, as the user of cfg, with operator.Start until the test ends or
// stop is called: for a test that runs it with the permissions a cluster gives it, or with the options a chart
// renders. It may be started again after a stop.
func StartWith(t testing.TB, cfg *rest.Config, opts operator.Options) (stop func()) {
	t.Helper()
	stopOperator, err := operator.Start(t.Context(), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		if err := stopOperator(); err != nil {
			t.Errorf("operator: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}
