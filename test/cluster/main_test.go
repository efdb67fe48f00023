package cluster

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencekit/fencekit/internal/testenv"
)

var (
	env *testenv.Env
	kcm *testenv.ControllerManager
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(run(m))
}

// run starts the control plane and kube-controller-manager, runs the tests and stops both, the controller
// manager first, whatever happened.
func run(m *testing.M) int {
	e, err := testenv.Start(testenv.WithWebhooks(), testenv.WithLeasePolicy())
	if err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		return 1
	}
	env = e
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: stopping the control plane:", err)
		}
	}()
	if kcm, err = env.StartControllerManager(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		return 1
	}
	code := m.Run()
	if err := kcm.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// kcmSays waits until a line of kube-controller-manager's log contains every part, and returns it: the
// evidence of what a controller tried and what the apiserver answered.
func kcmSays(t *testing.T, what string, parts ...string) string {
	t.Helper()
	var found string
	testenv.EventuallyWithin(t, 60*time.Second, what, func() (bool, string) {
		b, err := os.ReadFile(kcm.Log())
		if err != nil {
			return false, err.Error()
		}
		for _, line := range strings.Split(string(b), "\n") {
			if containsAll(line, parts) {
				found = line
				return true, line
			}
		}
		var near []string // the lines about the same namespace, to say what the controllers did instead
		if ns := testNamespace.FindString(parts[0]); ns != "" {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, ns) {
					near = append(near, line)
				}
			}
		}
		return false, fmt.Sprintf("no line of %s contains all of %q; its lines about that namespace: %q", kcm.Log(), parts, near)
	})
	t.Logf("kube-controller-manager: %s", found)
	return found
}

var testNamespace = regexp.MustCompile(`fencekit-test-[a-z0-9]+`)

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
