package sqlfence_test

import (
	"strings"
	"testing"

	"github.com/fencekit/fencekit/pkg/fencing/sqlfence"
)

// TestBadNames: fence and table names are validated before use (no SQL is built from an unchecked name).
func TestBadNames(t *testing.T) {
	for _, tc := range []struct {
		name, table string
	}{
		{"", ""},
		{strings.Repeat("x", sqlfence.MaxNameBytes+1), ""},
		{"a\x00b", ""},
		{"\xff", ""},
		{"ok", `fences"; DROP TABLE writes; --`},
		{"ok", "Fences"},
		{"ok", "a.b.c"},
	} {
		if _, err := sqlfence.New(tc.name, sqlfence.Options{Table: tc.table}); err == nil {
			t.Errorf("New(%q, Table %q) accepted", tc.name, tc.table)
		}
	}
}
