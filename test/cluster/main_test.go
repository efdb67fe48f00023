package cluster

import (
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/fencekit/fencekit/test/util/testenv"
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
