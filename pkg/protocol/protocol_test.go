package protocol

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseFences(t *testing.T) {
	for _, f := range []Fences{{}, {FencedResources: true}, {Objects: true}, {FencedResources: true, Objects: true}} {
		got, err := ParseFences(f.String())
		if err != nil || got != f {
			t.Errorf("ParseFences(%q) = %+v, %v; want %+v", f.String(), got, err, f)
		}
	}
	for _, s := range []string{"objects,fencedresources", "FencedResources", " objects", "fencedresources,", "all"} {
		if _, err := ParseFences(s); err == nil || !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Errorf("ParseFences(%q): %v, want an error naming the value", s, err)
		}
	}
}

func TestEpochFromFieldManager(t *testing.T) {
	for fm, want := range map[string]int64{
		"fencing.fencekit.io/epoch=7":                7,
		"fencing.fencekit.io/epoch=9007199254740991": MaxEpoch,
		"fencing.fencekit.io/epoch=9007199254740992": 0, // above MaxEpoch
		"fencing.fencekit.io/epoch=0":                0,
		"fencing.fencekit.io/epoch=07":               0,
		"fencing.fencekit.io/epoch=+7":               0,
		"fencing.fencekit.io/epoch=-7":               0,
		"fencing.fencekit.io/epoch=":                 0,
		"fencing.fencekit.io/epoch=7 ":               0, //nolint:gocritic // the trailing space is the case
		"kubectl-edit":                               0,
		"":                                           0,
	} {
		got, ok := EpochFromFieldManager(fm)
		if got != want || ok != (want != 0) {
			t.Errorf("EpochFromFieldManager(%q) = %d, %v; want %d, %v", fm, got, ok, want, want != 0)
		}
	}
	if got := (Token{Epoch: 42}).FieldManager(); got != "fencing.fencekit.io/epoch=42" {
		t.Errorf("Token{Epoch: 42}.FieldManager() = %q", got)
	}
}
