package operator_test

import (
	"testing"

	"github.com/fencekit/fencekit/test/util/testenv"
)

// The operator's own tests: its election, its metrics endpoint, its build information. What its webhooks
// admit and refuse is tested in test/admission.

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }
