package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencekit/fencekit/internal/dev/demo"
	"github.com/fencekit/fencekit/test/util/pgtest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var (
	target *demo.Target
	pg     *pgtest.Server
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	t, stop, err := demo.Local(context.Background(), testenv.RepoRoot(), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	target = t
	if pg, err = pgtest.Start(); err != nil {
		stop()
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := pg.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	}
	stop()
	os.Exit(code)
}

func run(t *testing.T, s demo.Settings, scenario demo.Scenario, fenced bool) *demo.Result {
	t.Helper()
	name := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
	res, err := demo.Run(t.Context(), *target, s, scenario, fenced, func(e demo.Event) {
		t.Log(demo.Style{}.Line(name, e))
	})
	if err != nil {
		t.Fatalf("%s %s run: %v", name, scenario, err)
	}
	return res
}

// both plays a scenario fenced and unfenced at once, in parallel subtests, and returns the two results; it
// stops the test if either run failed.
func both[R any](t *testing.T, play func(t *testing.T, fenced bool, name string) (*R, error)) (fenced, unfenced *R) {
	t.Helper()
	t.Run("group", func(t *testing.T) {
		for _, f := range []bool{true, false} {
			name := map[bool]string{true: "fenced", false: "unfenced"}[f]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				res, err := play(t, f, name)
				if err != nil {
					t.Fatalf("%s run: %v", name, err)
				}
				if f {
					fenced = res
				} else {
					unfenced = res
				}
			})
		}
	})
	if fenced == nil || unfenced == nil {
		t.FailNow()
	}
	return fenced, unfenced
}

// monotonic checks that the admitted writes never went down in epoch.
func monotonic(t *testing.T, h []demo.Written) {
	t.Helper()
	for i := 1; i < len(h); i++ {
		if h[i].Epoch < h[i-1].Epoch {
			t.Errorf("admitted write by %s at epoch %d after one by %s at epoch %d: history %v", h[i].Writer, h[i].Epoch, h[i-1].Writer, h[i-1].Epoch, h)
		}
	}
}

// TestPausedHolder is `make demo` at its default timings (15 s lease, 20 s pause): W1 stopped past its
// lease just before a write; W2 takes over and writes; W1 resumes. Fenced, W1's write is refused as stale
// and W2's data stays; unfenced, W1 overwrites W2 (if that ever stopped happening, the scenario would no
// longer reproduce the problem, and this test would say so). A pause of 12 s or more once made W1's write
// fail with "context deadline exceeded" (docs/facts.md says why); the quick timings never showed it.
func TestPausedHolder(t *testing.T) {
	t.Parallel()
	testPausedHolder(t, demo.DefaultSettings())
}

// TestPausedHolderQuick is the same scenario at `make demo DEMO_ARGS=--quick`'s timings.
func TestPausedHolderQuick(t *testing.T) {
	t.Parallel()
	testPausedHolder(t, demo.QuickSettings())
}

func testPausedHolder(t *testing.T, s demo.Settings) {
	fenced, unfenced := both(t, func(t *testing.T, fenced bool, _ string) (*demo.Result, error) {
		return run(t, s, demo.PausedHolder, fenced), nil
	})
	if err := demo.Check(fenced, unfenced); err != nil {
		t.Fatal(err)
	}
	if late := fenced.LateWrite; late.Epoch != fenced.W1Epoch || late.Reason != "FencingStaleEpoch" {
		t.Errorf("W1's late write: epoch %d reason %q, want epoch %d refused as FencingStaleEpoch", late.Epoch, late.Reason, fenced.W1Epoch)
	}
	if got := fenced.Final["epoch"]; got != float64(fenced.W2Epoch) {
		t.Errorf("stored data was written at epoch %v, want W2's %d", got, fenced.W2Epoch)
	}
	monotonic(t, fenced.History)
	want := []demo.Written{{Epoch: fenced.W1Epoch, Writer: "W1"}, {Epoch: fenced.W2Epoch, Writer: "W1"}, {Epoch: fenced.W2Epoch, Writer: "W2"}}
	if fmt.Sprint(fenced.History) != fmt.Sprint(want) {
		// W1's write 1, then fence-on-acquire (W2's epoch, W1's data), then W2's write.
		t.Errorf("fenced history %v, want %v", fenced.History, want)
	}
	if fmt.Sprint(unfenced.History) != fmt.Sprint([]demo.Written{{Writer: "W1"}, {Writer: "W2"}, {Writer: "W1"}}) {
		t.Errorf("unfenced history %v, want W1, W2, then W1 again", unfenced.History)
	}
}

// TestPausedBeforeTakeoverWrite: W1 resumes after W2 acquired but before W2 wrote anything. Only
// fence-on-acquire stands between W1 and the resource, and it refuses W1's write.
func TestPausedBeforeTakeoverWrite(t *testing.T) {
	t.Parallel()
	res := run(t, demo.QuickSettings(), demo.PausedBeforeTakeoverWrite, true)
	if res.W2Epoch != res.W1Epoch+1 {
		t.Errorf("W2 acquired epoch %d, want %d", res.W2Epoch, res.W1Epoch+1)
	}
	if res.StaleAdmitted() || res.LateWrite.Reason != "FencingStaleEpoch" {
		t.Fatalf("W1's late write: accepted=%v reason %q error %q, want refused as FencingStaleEpoch", res.StaleAdmitted(), res.LateWrite.Reason, res.LateWrite.Error)
	}
	if res.Final["writer"] != "W1" || res.Final["write"] != float64(1) || res.Final["(epoch)"] != res.W2Epoch {
		t.Errorf("stored %v: want W1's first write, fenced at W2's epoch %d", res.Final, res.W2Epoch)
	}
	monotonic(t, res.History)
}

// TestCrash: W1 killed with SIGKILL; W2 takes over after the lease, at a higher epoch, and writes.
func TestCrash(t *testing.T) {
	t.Parallel()
	res := run(t, demo.QuickSettings(), demo.Crash, true)
	if res.W2Epoch <= res.W1Epoch {
		t.Errorf("W2 acquired epoch %d, not above W1's %d", res.W2Epoch, res.W1Epoch)
	}
	if res.Final["writer"] != "W2" {
		t.Errorf("stored %v, want W2's write", res.Final)
	}
	monotonic(t, res.History)
	if len(res.History) == 0 || res.History[len(res.History)-1].Epoch != res.W2Epoch {
		t.Errorf("history %v does not end at W2's epoch %d", res.History, res.W2Epoch)
	}
}

// TestControllerScenario is `fencekit-dev demo --scenario controller --quick`: examples/controller's paused
// leader, fenced (every late write refused as stale, B's state untouched) and unfenced (all admitted, B's
// canary deleted).
func TestControllerScenario(t *testing.T) {
	t.Parallel()
	tgt := *target
	bin, err := demo.Build(testenv.RepoRoot(), t.TempDir(), "./examples/controller")
	if err != nil {
		t.Fatal(err)
	}
	tgt.ControllerBinary = bin
	fenced, unfenced := both(t, func(t *testing.T, fenced bool, name string) (*demo.ControllerResult, error) {
		return demo.RunController(t.Context(), tgt, demo.QuickSettings(), fenced, func(e demo.Event) { t.Log(demo.Style{}.ControllerLine(name, e)) })
	})
	if err := demo.ControllerCheck(fenced, unfenced); err != nil {
		t.Fatal(err)
	}
	if fenced.W2Epoch <= fenced.W1Epoch {
		t.Errorf("B acquired epoch %d, not above A's %d", fenced.W2Epoch, fenced.W1Epoch)
	}
}
