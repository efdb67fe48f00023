package httpfence_test

import (
	"testing"

	"github.com/fencekit/fencekit/test/util/pgtest"
)

// pg is the package's PostgreSQL server; each test takes a database of its own.
var pg *pgtest.Server

func TestMain(m *testing.M) { pgtest.Main(m, &pg) }
