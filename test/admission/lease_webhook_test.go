package admission_test

import (
	"fmt"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestLeaseWebhookLeavesTheTermToThePolicy: the Lease webhook (admission.MaxFreeLeaseBytes) is sent every
// write of a fenced Lease but those that acquire, renew or release it. With the operator stopped (its
// webhook unreachable, failurePolicy Fail), an elector still acquires, renews and releases, and another
// elector still acquires: an election never waits for the operator. Another user's tokenless annotation
// is refused meanwhile (fail closed), and admitted once the operator serves again.
func TestLeaseWebhookLeavesTheTermToThePolicy(t *testing.T) {
	stop := operatortest.Start(t, env)
	ns := env.Namespace(t)
	waitForLeaseWebhook(t)
	stop()

	holder, intruder := newWorker(t, ns, "holder"), newWorker(t, ns, "intruder")
	tok := holder.Acquire(t, ns, "l", 1)
	holder.Renew(t, tok)
	annotate := func() error {
		return retryRBAC(t, "the intruder's annotation", func() error {
			return intruder.Client.Patch(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "l"}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/note":"x"}}}`)))
		})
	}
	if err := annotate(); err == nil || !strings.Contains(err.Error(), `failed calling webhook "leases.fencing.fencekit.io"`) {
		t.Errorf("a tokenless annotation of the fenced Lease while the Lease webhook is down: %v, want refused for the webhook", err)
	}
	holder.Release(t, tok)
	intruder.Acquire(t, ns, "l", 2)

	operatortest.Start(t, env)
	testenv.Eventually(t, "the intruder's annotation is admitted once the Lease webhook serves again", func() (bool, string) {
		err := annotate()
		return err == nil, fmt.Sprint(err)
	})
}

// TestLeaseWebhookBoundsManagedFields: another user with the fencekit-elector role sends, in a merge patch
// of the fenced Lease, one more managedFields entry owning annotations the Lease does not have (the
// apiserver keeps the entries a write sends, and the Lease policy's CEL cannot measure them). Over
// admission.MaxFreeLeaseBytes it is refused, with the Lease, the field and both sizes named; the holder
// then renews and releases, and the next acquisition goes through.
func TestLeaseWebhookBoundsManagedFields(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	waitForLeaseWebhook(t)
	holder, intruder := newWorker(t, ns, "holder"), newWorker(t, ns, "intruder")
	tok := holder.Acquire(t, ns, "l", 1)

	lease := testenv.Read[coordinationv1.Lease](t, env.Client, ns, "l")
	owned := map[string]any{}
	for i := range 20000 {
		owned[fmt.Sprintf("f:example.com/pad-%05d", i)] = map[string]any{}
	}
	entries := make([]any, 0, len(lease.ManagedFields)+1)
	for _, e := range lease.ManagedFields {
		entries = append(entries, e)
	}
	entries = append(entries, map[string]any{"manager": "pad", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
		"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:metadata": map[string]any{"f:annotations": owned}}})
	patch := mustJSON(t, map[string]any{"metadata": map[string]any{"managedFields": entries}})
	err := retryRBAC(t, "the intruder's padding", func() error {
		return intruder.Client.Patch(t.Context(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "l"}},
			client.RawPatch(types.MergePatchType, patch))
	})
	mustContain(t, fmt.Sprintf("%d bytes of managedFields on the fenced Lease, without a token", len(patch)), err,
		func(err error) bool { return fencing.ReasonOf(err) == protocol.ReasonInvalid },
		"Lease "+ns+"/l: this write, which neither acquires, renews nor releases it, grows the fenced Lease from",
		fmt.Sprintf("over the bound of %d bytes", admission.MaxFreeLeaseBytes))
	after := testenv.Read[coordinationv1.Lease](t, env.Client, ns, "l")
	if n := len(mustJSON(t, after)); n > admission.MaxFreeLeaseBytes {
		t.Errorf("the fenced Lease is %d bytes after the refused padding", n)
	}
	holder.Renew(t, tok)
	holder.Release(t, tok)
	intruder.Acquire(t, ns, "l", 2)
}

// waitForLeaseWebhook waits until the operator's configuration of the object webhooks holds the Lease
// webhook.
func waitForLeaseWebhook(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, "the operator configures the Lease webhook", func() (bool, string) {
		var cfg admissionregistrationv1.ValidatingWebhookConfiguration
		if err := env.Client.Get(t.Context(), types.NamespacedName{Name: "fencekit-objects"}, &cfg); err != nil {
			return false, err.Error()
		}
		names := make([]string, 0, len(cfg.Webhooks))
		for _, w := range cfg.Webhooks {
			if w.Name == "leases.fencing.fencekit.io" {
				return true, ""
			}
			names = append(names, w.Name)
		}
		return false, "webhooks: " + strings.Join(names, ", ")
	})
}
