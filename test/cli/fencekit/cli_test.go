package fencekit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencekit/fencekit/test/util/kubeconfig"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

// The control plane has fencekit's Lease policy and the fencekit-elector ClusterRole, as a cluster with
// the chart has.
func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithLeasePolicy()) }

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

// fencekit builds cmd/fencekit once per test binary and returns its path.
func fencekit(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "fencekit-cli-test-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "fencekit")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/fencekit/fencekit/cmd/fencekit").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build github.com/fencekit/fencekit/cmd/fencekit: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs fencekit with args and the environment env (added to this process's) and waits for it.
func run(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang fails the test, with the output
	defer cancel()
	cmd := exec.CommandContext(ctx, fencekit(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running fencekit %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// kubeconfigOf writes a kubeconfig for a new client certificate of user (in groups) and returns its path.
func kubeconfigOf(t *testing.T, user string, groups ...string) string {
	t.Helper()
	u, err := env.Environment.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig.ForTest(t, u.Config())
}

// fast are short elector timings, for the tests that elect.
var fast = []string{"--lease-duration=2s", "--renew-deadline=1500ms", "--retry-period=300ms", "--safety-margin=200ms", "--fence-on-acquire=false"}

const (
	subdomainRule = `a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`
	labelRule     = `a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`
)

// TestUsageErrors: a command line fencekit can never act on fails at once, before any request, with one
// line naming the flag, the value and the rule, and exit status 64.
func TestUsageErrors(t *testing.T) {
	long := strings.Repeat("a", 300)
	// A cluster configuration that is never contacted: the timings are checked before any request.
	unreached := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreached, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"lease with an underscore": {[]string{"run", "--lease", "Bad_Name", "--", "true"},
			`fencekit run: --lease "Bad_Name" is not a valid Lease name: ` + subdomainRule},
		"lease of 300 characters": {[]string{"elect", "--lease", long},
			`fencekit elect: --lease "` + long + `" is not a valid Lease name: must be no more than 253 characters`},
		"lease with a slash": {[]string{"run", "--lease", "a/b", "--", "true"},
			`fencekit run: --lease "a/b" is not a valid Lease name: ` + subdomainRule},
		"no lease": {[]string{"run", "--", "true"}, `fencekit run: --lease is required`},
		"namespace with an underscore": {[]string{"run", "--lease", "x", "--namespace", "Bad_NS", "--", "true"},
			`fencekit run: --namespace "Bad_NS" is not a valid namespace name: ` + labelRule},
		"negative grace": {[]string{"run", "--lease", "x", "--grace", "-1s", "--", "true"},
			`fencekit run: --grace -1s is negative: a duration must be 0 or more`},
		"unknown on-loss": {[]string{"run", "--lease", "x", "--on-loss", "restart", "--", "true"},
			`fencekit run: --on-loss="restart": want exit (end when a term ends) or again (run CMD again on the next term)`},
		"negative timeout": {[]string{"elect", "--lease", "x", "--timeout=-5s"},
			`fencekit elect: --timeout -5s is negative: a duration must be 0 or more`},
		"negative lease duration": {[]string{"run", "--lease", "x", "--lease-duration=-15s", "--", "true"},
			`fencekit run: --lease-duration -15s is negative: a duration must be 0 or more`},
		"inconsistent timings": {[]string{"run", "--kubeconfig", unreached, "--lease", "x", "--lease-duration=2s", "--renew-deadline=5s", "--", "true"},
			`fencekit run: elector: invalid config: leaseDuration (2s) must be greater than renewDeadline (5s); the safe-work window leaseDuration*(1-maxClockDrift)-safetyMargin = 2s*(1-0.01)-2s = -20ms must be greater than renewDeadline (5s)`},
		"no command": {[]string{"run", "--lease", "x"},
			`fencekit run: no command given: fencekit run --lease NAME [flags] -- CMD [ARGS...]`},
		"unknown flag": {[]string{"run", "--lease", "x", "--bogus", "--", "true"},
			`fencekit run: unknown flag: --bogus (see 'fencekit run --help')`},
		"unknown command":   {[]string{"bogus"}, `fencekit: unknown command "bogus" for "fencekit"`},
		"no command at all": {nil, `fencekit: a command is required: run, elect, selftest or version (see 'fencekit --help')`},
		"demo": {[]string{"demo", "--help"},
			`fencekit demo: "demo" is a development command of fencekit-dev, which needs the repository: 'go run ./cmd/fencekit-dev demo' (make demo)`},
	} {
		t.Run(name, func(t *testing.T) {
			r := run(t, []string{"KUBECONFIG=/nonexistent"}, tc.args...)
			if r.code != 64 || r.stderr != tc.want+"\n" || r.stdout != "" {
				t.Errorf("fencekit %v: status %d, stderr %q, stdout %q\nwant status 64, stderr %q", tc.args, r.code, r.stderr, r.stdout, tc.want+"\n")
			}
		})
	}
}

// TestHelpAndVersion: --help prints to stdout and exits 0; every command has a synopsis and an example;
// --version and the version command print the version.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"elect", "-h"}, {"selftest", "--help"}, {"version", "--help"}} {
		r := run(t, nil, args...)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("fencekit %v: status %d, stderr %q, stdout %q; want status 0 and the help on stdout", args, r.code, r.stderr, r.stdout)
		}
	}
	for sub, want := range map[string][]string{
		"run":      {"fencekit run --lease NAME [flags] -- CMD [ARGS...]", "Examples:", "--timeout duration", "--grace duration"},
		"elect":    {"fencekit elect --lease NAME [--serve ADDR] [--token-file PATH] [flags]", "Examples:", "--timeout duration", "GET /leader"},
		"selftest": {"fencekit selftest --namespace NS --lease NAME --resource NAME [flags]", "Examples:"},
	} {
		r := run(t, nil, sub, "--help")
		for _, w := range want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("fencekit %s --help lacks %q:\n%s", sub, w, r.stdout)
			}
		}
	}
	r := run(t, nil, "--help")
	for _, line := range []string{"  elect       The token sidecar", "  run         Run a command only while leading", "  selftest    Check an installation", "  version     Print the version"} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("fencekit --help lacks the synopsis %q:\n%s", line, r.stdout)
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		if r := run(t, nil, args...); r.code != 0 || r.stdout != "fencekit dev (unknown)\n" || r.stderr != "" {
			t.Errorf("fencekit %v: status %d, stdout %q, stderr %q; want 0 and \"fencekit dev (unknown)\"", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestPermanentErrors: a namespace that does not exist, a user the apiserver forbids the Lease, and
// credentials it does not accept fail after PermanentAttempts refusals with one line and exit status 78, instead of retrying for ever.
func TestPermanentErrors(t *testing.T) {
	admin := kubeconfigOf(t, "cli-admin", "system:masters")
	r := run(t, nil, append([]string{"run", "--kubeconfig=" + admin, "--namespace=no-such-namespace", "--lease=orders", "--identity=a"}, append(fast, "--", "true")...)...)
	want := `fencekit run: cannot elect on Lease no-such-namespace/orders: the namespace does not exist: create Lease refused 3 times in a row: namespaces "no-such-namespace" not found`
	if r.code != 78 || lastLine(r.stderr) != want {
		t.Errorf("in a missing namespace: status %d, last line %q\nwant 78 and %q", r.code, lastLine(r.stderr), want)
	}

	ns := env.Namespace(t)
	nobody := kubeconfigOf(t, "cli-nobody")
	r = run(t, nil, append([]string{"elect", "--kubeconfig=" + nobody, "--namespace=" + ns, "--lease=orders", "--identity=a", "--serve=127.0.0.1:0"}, fast...)...)
	want = fmt.Sprintf(`fencekit elect: cannot elect on Lease %s/orders: forbidden (is the fencekit-elector ClusterRole bound to this ServiceAccount?): list Leases refused 3 times in a row: leases.coordination.k8s.io "orders" is forbidden: User "cli-nobody" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "%s"`, ns, ns)
	if r.code != 78 || lastLine(r.stderr) != want {
		t.Errorf("without RBAC: status %d, last line %q\nwant 78 and %q", r.code, lastLine(r.stderr), want)
	}
	if strings.Contains(r.stderr, "stacktrace") {
		t.Errorf("the log carries stack traces:\n%s", r.stderr)
	}

	bogus := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(bogus, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: not-a-token}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, env.Config.Host)), 0o600); err != nil {
		t.Fatal(err)
	}
	r = run(t, nil, append([]string{"run", "--kubeconfig=" + bogus, "--namespace=" + ns, "--lease=orders", "--identity=a"}, append(fast, "--", "true")...)...)
	want = fmt.Sprintf(`fencekit run: cannot elect on Lease %s/orders: the apiserver does not accept these credentials: create SelfSubjectReview refused 3 times in a row: Unauthorized`, ns)
	if r.code != 78 || lastLine(r.stderr) != want {
		t.Errorf("with a bad token: status %d, last line %q\nwant 78 and %q", r.code, lastLine(r.stderr), want)
	}

	// No cluster configuration at all: the message says where fencekit looked, in its own words.
	r = run(t, []string{"KUBECONFIG=", "HOME=" + t.TempDir(), "KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="}, "run", "--lease=orders", "--", "true")
	if want := "fencekit run: finding the cluster: no --kubeconfig, no $KUBECONFIG, no ~/.kube/config and not in a pod"; r.code != 78 || !strings.HasPrefix(lastLine(r.stderr), want) {
		t.Errorf("without a cluster configuration: status %d, last line %q\nwant 78 and a line starting %q", r.code, lastLine(r.stderr), want)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
