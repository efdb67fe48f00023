package admission

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// withManaged is ConfigMap ns/app whose managedFields are the given entries.
func withManaged(entries ...map[string]any) *unstructured.Unstructured {
	list := make([]any, len(entries))
	for i, e := range entries {
		list[i] = e
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "ns", "name": "app", "managedFields": list},
	}}
}

func managedEntry(manager, operation string, fields map[string]any) map[string]any {
	return map[string]any{"manager": manager, "operation": operation, "apiVersion": "v1",
		"fieldsType": "FieldsV1", "fieldsV1": fields}
}

// A write that moves data.b from the holder's Update entry into its Apply entry makes two refused
// changes (the Apply entry gains data.b; the emptied Update entry reads as owning the map data). The
// refusal names the field, data.b, on every run, whatever the order of Go's map iteration.
func TestOwnershipChangesNameTheMostSpecificField(t *testing.T) {
	holder := "fencing.fencekit.io/epoch=1"
	old := withManaged(
		managedEntry(holder, "Apply", map[string]any{"f:data": map[string]any{"f:a": map[string]any{}}}),
		managedEntry(holder, "Update", map[string]any{"f:data": map[string]any{"f:b": map[string]any{}}}),
	)
	moved := withManaged(
		managedEntry(holder, "Apply", map[string]any{"f:data": map[string]any{"f:a": map[string]any{}, "f:b": map[string]any{}}}),
		managedEntry(holder, "Update", map[string]any{"f:data": map[string]any{}}),
	)
	for range 50 {
		changes, err := ownershipChanges(old, moved, func(Path) bool { return false }, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) == 0 {
			t.Fatal("moving ownership of data.b between the holder's entries is not a change")
		}
		if got := changes[0].path.String(); got != "data.b" {
			t.Fatalf("the first change names %q (%s in the entry of %s), want data.b", got, changes[0].why, changes[0].entry)
		}
	}
}
