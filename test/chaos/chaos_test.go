package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencekit/fencekit/internal/dev/devcluster"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var (
	flagSeed     = flag.Int64("chaos.seed", 0, "first seed (0: from the clock); run i uses seed+i")
	flagSeeds    = flag.Int("chaos.seeds", 1, "how many seeds to run each scenario with")
	flagDuration = flag.Duration("chaos.duration", 20*time.Second, "length of one run's fault schedule (a quiet tail of two leases follows)")
	flagSuite    = flag.String("chaos.suite", "short", "short (F3 fenced and control, the other faults mixed) or full (every fault alone, mixed, and the control)")
	flagFaults   = flag.String("chaos.faults", "", "run only these faults (comma-separated, e.g. F3,F4), each alone, fenced and as the control")
	flagDir      = flag.String("chaos.dir", "", "directory for the histories (default: a new temporary directory, removed if every run passed)")
	flagReplay   = flag.String("chaos.replay", "", "check the histories of a run directory again instead of running")
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

func scenarios(t *testing.T) []Scenario {
	if *flagFaults != "" {
		faults, err := ParseFaults(*flagFaults)
		if err != nil {
			t.Fatal(err)
		}
		var out []Scenario
		for _, f := range faults {
			out = append(out, Scenario{Label: string(f), Faults: []Fault{f}, Fenced: true})
			if !f.FencedOnly() {
				out = append(out, Scenario{Label: string(f), Faults: []Fault{f}})
			}
		}
		return out
	}
	others := []Fault{F1Kill, F2Term, F4Partition, F5Slow, F8ClockSkew, F9Starve, F10Webhook, F11CertRotation, F12Adversary}
	if *flagSuite == "short" {
		return []Scenario{
			{Label: "F3", Faults: []Fault{F3Zombie}, Fenced: true},
			{Label: "F3", Faults: []Fault{F3Zombie}},
			{Label: "mixed", Faults: others, Fenced: true},
		}
	}
	var out []Scenario
	for _, f := range AllFaults {
		out = append(out, Scenario{Label: string(f), Faults: []Fault{f}, Fenced: true})
	}
	return append(out,
		Scenario{Label: "mixed", Faults: AllFaults, Fenced: true},
		Scenario{Label: "F3", Faults: []Fault{F3Zombie}},
		Scenario{Label: "mixed", Faults: []Fault{F1Kill, F2Term, F3Zombie, F4Partition, F5Slow}},
	)
}

// TestChaos runs the workload under seeded fault schedules, fenced by fencekit and as the unfenced
// control, and checks every history: no violation under fencekit; the control flagged in every run in
// which a zombie (F3) was injected. The seed is printed; -chaos.seed replays the same schedules.
func TestChaos(t *testing.T) {
	if *flagReplay != "" {
		replay(t, *flagReplay)
		return
	}
	seed := *flagSeed
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	dir := *flagDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "fencekit-chaos-"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d, %d seed(s), %s per run, histories in %s", seed, *flagSeeds, *flagDuration, dir)
	t.Logf("replay: go test ./test/chaos -run '^TestChaos$' -chaos.seed=%d -chaos.seeds=%d -chaos.duration=%s -chaos.suite=%s", seed, *flagSeeds, *flagDuration, *flagSuite)
	began, load0 := time.Now(), loadAverage()
	cl := cluster(t)
	var ran []Scenario
	var results []*RunResult
	for i := range *flagSeeds {
		s := seed + int64(i)
		for j, sc := range scenarios(t) {
			name := fmt.Sprintf("chaos-%d-%s-%s-%d", s, strings.ToLower(sc.Label), sc.Mode(), j)
			cfg := RunConfig{Name: name, Seed: s, Faults: sc.Faults, Fenced: sc.Fenced, Duration: *flagDuration,
				Timings: ShortTimings(), Dir: filepath.Join(dir, name), Logf: t.Logf}
			res, err := Run(t.Context(), cl, cfg)
			if err != nil {
				t.Fatalf("%s (seed %d): %v", name, s, err)
			}
			writeMeta(t, cfg, res)
			ran, results = append(ran, sc), append(results, res)
			judge(t, sc, cfg, res)
		}
	}
	var table strings.Builder
	PrintTable(&table, Summarize(ran, results))
	fmt.Printf("fencekit chaos: seeds %d..%d, %s per run, %s in all; load average at the start %s, at the end %s\n%s",
		seed, seed+int64(*flagSeeds)-1, *flagDuration, time.Since(began).Round(time.Second), load0, loadAverage(), table.String())
	if !t.Failed() && *flagDir == "" {
		_ = os.RemoveAll(dir)
	} else {
		t.Logf("histories kept in %s", dir)
	}
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, for the summary.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// judge fails the test if fencekit let a violation through, or if the control was not caught.
func judge(t *testing.T, sc Scenario, cfg RunConfig, res *RunResult) {
	t.Helper()
	r := res.Report
	t.Logf("%s: %d writes (%d admitted, %d refused, %d unknown, %d stale-refused), %d fences, %d reads, %d late-admitted, linearizability %v, %d violations, injected %v",
		cfg.Name, r.Writes, r.Admitted, r.Refused, r.Unknown, r.StaleRefused, r.Fences, r.Reads, r.LateAdmissions, r.Linearizability, len(r.Violations), res.Applied)
	if r.Admitted == 0 {
		t.Errorf("%s: no write was admitted: the run exercised nothing (see %s)", cfg.Name, cfg.Dir)
	}
	if sc.Fenced {
		for i, v := range r.Violations {
			if i == 20 {
				t.Errorf("... %d more in %s/report.json", len(r.Violations)-20, cfg.Dir)
				break
			}
			t.Errorf("%s (seed %d): VIOLATION %s", cfg.Name, cfg.Seed, v)
		}
		return
	}
	if res.Applied[F3Zombie] > 0 && len(r.Violations) == 0 {
		t.Errorf("%s (seed %d): the unfenced control survived %d zombie(s) without a violation: the suite would not catch a broken fence (see %s)",
			cfg.Name, cfg.Seed, res.Applied[F3Zombie], cfg.Dir)
	}
	for i, v := range r.Violations {
		if i == 3 {
			break
		}
		t.Logf("%s: control flagged as expected: %s", cfg.Name, v)
	}
}

// runMeta is what replay needs to check a run directory again.
type runMeta struct {
	Target, Lease string
	Fenced        bool
	Seed          int64
	Schedule      []Event
}

func writeMeta(t *testing.T, cfg RunConfig, res *RunResult) {
	b, err := json.MarshalIndent(runMeta{Target: cfg.Name + "/target", Lease: cfg.Name + "/target-writer", Fenced: cfg.Fenced,
		Seed: cfg.Seed, Schedule: res.Schedule}, "", "  ")
	if err != nil {
		t.Errorf("encoding %s's run.json: %v", cfg.Name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, "run.json"), b, 0o644); err != nil {
		t.Error(err)
	}
}

// replay checks a kept run directory again and prints its violations.
func replay(t *testing.T, dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m runMeta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	h, err := LoadHistory(dir, m.Target, m.Lease, m.Fenced)
	if err != nil {
		t.Fatal(err)
	}
	r := Check(h, func(target string, lin Linearization) {
		path := filepath.Join(dir, "linearizability-replay.html")
		if err := VisualizeTo(path, lin); err == nil {
			t.Logf("visualization: %s", path)
		}
	})
	t.Logf("%d ops, %d versions: %d writes, %d admitted, %d refused, %d stale-refused, linearizability %v", len(h.Ops), len(h.Versions), r.Writes, r.Admitted, r.Refused, r.StaleRefused, r.Linearizability)
	for _, v := range r.Violations {
		t.Errorf("VIOLATION %s", v)
	}
}

// cluster returns the control plane with the operator running behind a webhook proxy, and the worker.
func cluster(t *testing.T) Cluster {
	workerBin := filepath.Join(t.TempDir(), "worker")
	cmd := exec.Command("go", "build", "-o", workerBin, "./test/chaos/worker")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building test/chaos/worker: %v\n%s", err, out)
	}
	// The apiserver calls the webhook at the address envtest configured; the proxy listens there and
	// forwards to the webhook server, on another port.
	w := env.Environment.WebhookInstallOptions
	backend := testenv.FreePort(t)
	webhook, err := NewProxy(net.JoinHostPort(w.LocalServingHost, strconv.Itoa(w.LocalServingPort)), "127.0.0.1:"+strconv.Itoa(backend))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(webhook.Close)
	serveAdmission(t, backend)
	admin, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return Cluster{
		Admin: admin, AdminConfig: env.Config, WorkerBinary: workerBin, Webhook: webhook, Restart: newRestarter(t).restart,
		Rotator: &WebhookRotator{Admin: admin, ConfigName: "validating-webhook-configuration", CertDir: w.LocalServingCertDir,
			Host: w.LocalServingHost, Backend: "127.0.0.1:" + strconv.Itoa(backend)},
		AddUser: func(name string, groups ...string) (*rest.Config, error) {
			u, err := env.Environment.AddUser(envtest.User{Name: name, Groups: groups}, nil)
			if err != nil {
				return nil, err
			}
			return u.Config(), nil
		},
		BindElector: func(ctx context.Context, namespace, user string) error {
			return devcluster.BindElector(ctx, env.Client, namespace, user)
		},
	}
}
