package fencing_test

import (
	"testing"

	"github.com/fencekit/fencekit/test/util/testenv"
)

// env is a control plane with fencekit's CRDs, not its operator: the tests of the writer against the
// running operator are in test/admission (writer_test.go), on the operator's side of the import rules.
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }
