package elector_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// padEntry is a managedFields entry of manager "pad" that owns n annotations the Lease does not have: what
// any user who may update the Lease can send, of any size up to the apiserver's request limit.
func padEntry(t *testing.T, n int) metav1.ManagedFieldsEntry {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"f:metadata":{"f:annotations":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"f:example.com/pad-%06d":{}`, i)
	}
	b.WriteString(`}}}`)
	now := metav1.Now()
	return metav1.ManagedFieldsEntry{Manager: "pad", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
		Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(b.String())}
}

func leaseBytes(t *testing.T, l *coordinationv1.Lease) int {
	t.Helper()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestAcquisitionStartsFieldOwnershipAfresh: another elector-role user pads the held Lease's managedFields
// with an entry that owns 5,000 annotations (a write the Lease policy admits: CEL cannot measure fieldsV1);
// the holder's renewals carry it, as every write of the whole Lease does. The next acquisition resets
// managedFields: the padding does not outlive the term it was written in, and the new holder's renewals
// write a Lease of the unpadded size.
func TestAcquisitionStartsFieldOwnershipAfresh(t *testing.T) {
	ns, h := parallelLock(t)
	cfg1 := h.config(t, ns, "first")
	cfg1.Client = electorClientset(t, ns, "first-user")
	first := start(t, cfg1)
	tok := h.wait(t, 30*time.Second)
	unpadded := leaseBytes(t, getLease(t, ns, "lock"))
	intruder := electorClientset(t, ns, "intruder-user").CoordinationV1().Leases(ns)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l := getLease(t, ns, "lock")
		l.ManagedFields = append(l.ManagedFields, padEntry(t, 5000))
		_, err := intruder.Update(t.Context(), l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatalf("the intruder's padding: %v", err)
	}
	padded := leaseBytes(t, getLease(t, ns, "lock"))
	if padded < unpadded+100_000 {
		t.Fatalf("the padding did not take: the Lease is %d bytes (%d before)", padded, unpadded)
	}
	first.stop() // releases
	cfg2 := h.config(t, ns, "second")
	cfg2.Client = electorClientset(t, ns, "second-user")
	start(t, cfg2)
	second := h.wait(t, 30*time.Second)
	if second.Epoch != tok.Epoch+1 {
		t.Fatalf("second acquisition at epoch %d, want %d", second.Epoch, tok.Epoch+1)
	}
	l := getLease(t, ns, "lock")
	var managers []string
	for _, e := range l.ManagedFields {
		managers = append(managers, e.Manager)
		if e.Manager == "pad" {
			t.Errorf("the pad entry outlived the term it was written in: the Lease is %d bytes after the acquisition at epoch %d", leaseBytes(t, l), second.Epoch)
		}
	}
	t.Logf("Lease: %d bytes at epoch %d, %d padded, %d after the acquisition at epoch %d (managers %v)",
		unpadded, tok.Epoch, padded, leaseBytes(t, l), second.Epoch, managers)
	if got := leaseBytes(t, l); got > 2*unpadded {
		t.Errorf("after the acquisition at epoch %d the Lease is %d bytes, over twice the unpadded %d", second.Epoch, got, unpadded)
	}
	h.check(t)
}
