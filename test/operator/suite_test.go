package operator_test

import (
	"testing"

	"github.com/fencekit/fencekit/test/util/testenv"
)

// The operator's tests on a control plane: its election and its metrics endpoint. What its webhooks admit
// and refuse is tested in test/admission.

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }
