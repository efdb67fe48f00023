package leasepolicy_test

import (
	"testing"

	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

// The control plane carries fencekit's Lease policy and the fencekit-elector role: the tests' admin
// client is exempt from the policy (break glass), the workers (env.NewWorker) are held to it.
func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithLeasePolicy()) }
