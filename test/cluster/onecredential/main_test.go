package onecredential

import (
	"testing"

	"github.com/fencekit/fencekit/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }
