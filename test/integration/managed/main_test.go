package managed_test

import (
	"testing"

	"github.com/fencekit/fencekit/test/util/testenv"
)

// env is a control plane with fencekit's CRDs, shared by the package's tests (each in its own namespace).
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }
