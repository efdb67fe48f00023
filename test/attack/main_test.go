package attack

import (
	"flag"
	"testing"
	"time"

	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

// The flags of a run. Without any, a run is the short fixed-seed run that make test runs.
var (
	flagSeed     = flag.Uint64("attack.seed", defaultSeed, "the generator's seed (0: from the clock, printed); the same seed generates the same steps")
	flagSteps    = flag.Int("attack.steps", defaultSteps, "stop after this many steps (0: no limit; -attack.duration then bounds the run)")
	flagDuration = flag.Duration("attack.duration", 0, "stop generating steps after this long (0: no limit; -attack.steps then bounds the run)")
	flagEvery    = flag.Int("attack.acquire-every", defaultAcquireEvery, "run the acquisition invariant (I3) every this many steps, and at the end")
	flagGC       = flag.Bool("attack.gc", true, "run the real kube-controller-manager's garbage collector next to the apiserver (I4 observes dependents deleted)")
)

// The short run of make test: a fixed seed whose steps exercise every route, in about a minute on 2 cores.
const (
	defaultSeed         = 20261201
	defaultSteps        = 48
	defaultAcquireEvery = 24
)

// stepTimeout bounds each request of a step and each of the holder's writes (I2).
const stepTimeout = 10 * time.Second

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }
