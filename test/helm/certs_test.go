package helm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/fencekit/fencekit/internal/operator"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// operatorOptions are the operator's options as the chart's Deployment sets them through its arguments;
// addresses and the certificate directory are moved to free local ones so that the operator can run in the
// test process.
func operatorOptions(t *testing.T, r rendered, namespace string) operator.Options {
	t.Helper()
	var d *appsv1.Deployment
	for _, u := range r.ofKind("Deployment") {
		d = as[appsv1.Deployment](t, u)
	}
	a := args(t, d)
	for _, env := range d.Spec.Template.Spec.Containers[0].Env {
		if env.Name == "POD_NAMESPACE" {
			t.Setenv("POD_NAMESPACE", namespace) // what the downward API gives the pods
		}
	}
	return operator.Options{
		MetricsAddr: "0", ProbeAddr: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		WebhookHost: "127.0.0.1", WebhookPort: testenv.FreePort(t), WebhookCertDir: t.TempDir(),
		CertRotation: a["cert-rotation"] == "true", CertSecretName: a["cert-secret-name"],
		WebhookServiceName: a["webhook-service-name"], WebhookConfigName: a["webhook-config-name"],
		ObjectsWebhookConfigName: a["objects-webhook-config-name"],
		LeaderElect:              a["leader-elect"] == "true", LeaderElectionNamespace: a["leader-election-namespace"],
		SkipNameValidation: true,
	}
}

// checkCertRotation runs the operator as id with the chart's arguments (certificate rotation on) against the
// chart's Secret and webhook configuration: with only the chart's permissions it becomes ready, which it does
// only once it has filled the Secret, written the files and injected the caBundle. The functions and run
// while the operator still serves.
func checkCertRotation(t *testing.T, id identity, r rendered, namespace, secretName, vwcName string, and ...func(operator.Options)) {
	t.Helper()
	opts := operatorOptions(t, r, namespace)
	if !opts.CertRotation || opts.CertSecretName != secretName || opts.WebhookConfigName != vwcName {
		t.Fatalf("the chart's arguments do not turn certificate rotation on for %s and %s: %+v", secretName, vwcName, opts)
	}
	mgr, err := operator.NewManager(id.config(), opts)
	if err != nil {
		t.Fatalf("the operator with the chart's arguments, as %s: %v", id.user, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("operator: %v", err)
		}
	}()
	// The kubelet's readiness probe, as the chart configures it.
	readyz := "http://" + opts.ProbeAddr + "/readyz"
	waitFor(t, "the operator's /readyz (certificate on disk and caBundle injected)", func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, readyz, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("/readyz: %s", resp.Status)
		}
		return true, nil
	})
	secret, vwc := readCerts(t, namespace, secretName, vwcName)
	for _, w := range vwc.Webhooks {
		if len(secret.Data["ca.crt"]) == 0 || !bytes.Equal(w.ClientConfig.CABundle, secret.Data["ca.crt"]) {
			t.Errorf("webhook %s: caBundle is not the CA the operator stored in Secret %s", w.Name, secretName)
		}
	}
	if !strings.Contains(string(secret.Data["tls.crt"]), "BEGIN CERTIFICATE") {
		t.Errorf("Secret %s holds no serving certificate", secretName)
	}
	for _, f := range and {
		f(opts)
	}
}
