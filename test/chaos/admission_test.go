package chaos

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator"
	fkscheme "github.com/fencekit/fencekit/internal/scheme"
	"github.com/fencekit/fencekit/test/util/operatortest"
)

// flagBroken is the deliberately broken build, reachable from this test binary only: the CRD loses its
// epoch rule and the webhook admits everything. The suite must fail under it.
var flagBroken = flag.Bool("chaos.broken", false, "run against a BROKEN fencekit (no CRD epoch rule, a webhook that allows everything): the suite must report violations")

// serveAdmission serves fencekit's admission on port: the operator, or under -chaos.broken an allow-all
// webhook after removing the CRD's epoch rule (the operator then runs without its webhook).
func serveAdmission(t *testing.T, port int) {
	if !*flagBroken {
		w := env.Environment.WebhookInstallOptions
		operatortest.Start(t, env, func(o *operator.Options) {
			o.WebhookHost, o.WebhookPort, o.WebhookCertDir = "127.0.0.1", port, w.LocalServingCertDir
		})
		return
	}
	t.Log("BROKEN BUILD: removing the CRD's epoch rule and answering every admission request with allow")
	operatortest.Start(t, env, func(o *operator.Options) { o.WebhookPort = 0 }) // controllers only
	w := env.Environment.WebhookInstallOptions
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(rw http.ResponseWriter, req *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(rw, "bad review", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		review.Request = nil
		_ = json.NewEncoder(rw).Encode(&review)
	})
	// The certificate is read at every handshake, so that F11's rotations reach this server too.
	srv := &http.Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Handler: mux, TLSConfig: &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(filepath.Join(w.LocalServingCertDir, "tls.crt"), filepath.Join(w.LocalServingCertDir, "tls.key"))
			return &c, err
		},
	}}
	go func() {
		err := srv.ListenAndServeTLS("", "")
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("allow-all webhook: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	removeEpochRule(t)
}

// removeEpochRule deletes the x-kubernetes-validations of spec.epoch and waits until the apiserver admits a
// lower epoch (probed with a dry-run patch of a FencedResource at epoch 5).
func removeEpochRule(t *testing.T) {
	ctx := t.Context()
	s := fkscheme.New()
	_ = apiextensionsv1.AddToScheme(s)
	c, err := client.New(env.Config, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, types.NamespacedName{Name: "fencedresources.fencing.fencekit.io"}, &crd); err != nil {
		t.Fatal(err)
	}
	for i := range crd.Spec.Versions {
		spec := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
		epoch := spec.Properties["epoch"]
		epoch.XValidations = nil
		spec.Properties["epoch"] = epoch
		crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"] = spec
	}
	if err := c.Update(ctx, &crd); err != nil {
		t.Fatal(err)
	}
	probe := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Name: "broken-build-probe", Namespace: "default"},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: "none", Epoch: 5}}
	if err := c.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = c.Patch(ctx, probe.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"epoch":1}}`)), client.DryRunAll)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("the apiserver still enforces the epoch rule after 30s: %v", last)
	}
}
