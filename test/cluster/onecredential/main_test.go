package onecredential

import (
	"testing"

	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }
