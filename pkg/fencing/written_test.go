package fencing

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestHolderWrote(t *testing.T) {
	entry := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	record := `{"f:metadata":{"f:annotations":{".":{},"f:fencing.fencekit.io/epoch":{}}}}`
	for name, tc := range map[string]struct {
		entries []metav1.ManagedFieldsEntry
		want    bool
	}{
		"raised only":                           {entries: []metav1.ManagedFieldsEntry{entry("fencing.fencekit.io/epoch=3", record)}},
		"raised, marker and hold":               {entries: []metav1.ManagedFieldsEntry{entry("fencing.fencekit.io/epoch=3", `{"f:metadata":{"f:annotations":{"f:fencing.fencekit.io/epoch":{},"f:fencing.fencekit.io/delete-at-epoch":{},"f:fencing.fencekit.io/hold-at-epoch":{}}}}`)}},
		"a record a user wrote":                 {entries: []metav1.ManagedFieldsEntry{entry("kubectl-edit", `{"f:metadata":{"f:annotations":{"f:fencing.fencekit.io/epoch":{}},"f:labels":{"f:app":{}}},"f:data":{"f:k":{}}}`)}},
		"the holder's data":                     {entries: []metav1.ManagedFieldsEntry{entry("fencing.fencekit.io/epoch=2", `{"f:data":{".":{},"f:k":{}}}`), entry("fencing.fencekit.io/epoch=3", record)}, want: true},
		"the holder's label with the record":    {entries: []metav1.ManagedFieldsEntry{entry("fencing.fencekit.io/epoch=3", `{"f:metadata":{"f:annotations":{"f:fencing.fencekit.io/epoch":{}},"f:labels":{"f:app":{}}}}`)}, want: true},
		"the holder's other annotation":         {entries: []metav1.ManagedFieldsEntry{entry("fencing.fencekit.io/epoch=3", `{"f:metadata":{"f:annotations":{"f:fencing.fencekit.io/epoch":{},"f:note":{}}}}`)}, want: true},
		"an earlier raise that created the map": {entries: []metav1.ManagedFieldsEntry{entry("fencing.fencekit.io/epoch=1", `{"f:metadata":{"f:annotations":{".":{}}}}`), entry("fencing.fencekit.io/epoch=2", record)}},
		"no managedFields":                      {},
		"the holder's data merged into ancient-changes": {entries: []metav1.ManagedFieldsEntry{entry("ancient-changes", `{"f:data":{"f:k":{}},"f:metadata":{"f:finalizers":{}}}`),
			entry("tool-9", `{"f:metadata":{"f:finalizers":{"v:\"f9\"":{}}}}`)}, want: true},
		"finalizers and status merged into ancient-changes": {entries: []metav1.ManagedFieldsEntry{entry("ancient-changes", `{"f:metadata":{"f:finalizers":{}},"f:status":{"f:ready":{}}}`)}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x"}}}
		u.SetManagedFields(tc.entries)
		if got := HolderWrote(u); got != tc.want {
			t.Errorf("%s: HolderWrote = %v, want %v", name, got, tc.want)
		}
	}
}
