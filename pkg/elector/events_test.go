package elector

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// An Event note is cut to the 1024 bytes events.k8s.io/v1 accepts, at a UTF-8 boundary: a longer one is
// refused by the apiserver and the Event lost (a fence-on-acquire that failed on 100 resources did that).
func TestNoteLimit(t *testing.T) {
	if got := note("%s lost epoch %d", "a", 7); got != "a lost epoch 7" {
		t.Errorf("short note %q", got)
	}
	long := note("%s", strings.Repeat("é", 600)) // 1200 bytes, 2 per rune
	if len(long) > noteLimit || !strings.HasSuffix(long, "...") || !utf8.ValidString(long) {
		t.Errorf("long note: %d bytes, valid UTF-8 %v, ends %q", len(long), utf8.ValidString(long), long[len(long)-5:])
	}
	if exact := strings.Repeat("x", noteLimit); note("%s", exact) != exact {
		t.Errorf("a note of exactly %d bytes was cut", noteLimit)
	}
}
