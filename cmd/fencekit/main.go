// Command fencekit is the fencekit CLI, for workloads not written in Go (docs/run.md):
//
//	fencekit run        runs a command only while leading a Lease, with the fencing token in its environment
//	fencekit elect      the token sidecar: elects on a Lease and serves the token over HTTP and in a file
//	fencekit selftest   the Helm chart's `helm test`: a stale write refused by the webhook, a current one admitted
//	fencekit version    prints the version
//
// It only parses flags and wires; the work is done in internal/cli/leadrun. It links no test code (make
// importcheck); the development commands are in cmd/fencekit-dev.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fencekit/fencekit/internal/cli/leadrun"
	"github.com/fencekit/fencekit/internal/version"
)

// The exit statuses of fencekit's own failures (sysexits.h), documented in docs/run.md. `fencekit run`
// otherwise exits with the command's status, unchanged.
const (
	// exitFailed: any other failure, and a stop (SIGTERM, Ctrl-C) before leading.
	exitFailed = 1
	// exitUsage: the command line is wrong (EX_USAGE): an unknown command or flag, a missing or invalid
	// value, a negative duration, an invalid Lease or namespace name, inconsistent elector timings.
	exitUsage = 64
	// exitNotAcquired: the Lease was not acquired within --timeout (EX_TEMPFAIL: try again later).
	exitNotAcquired = 75
	// exitConfig: the setup is wrong (EX_CONFIG): no cluster configuration, an address that cannot be
	// listened on, or the apiserver refused the election permanently (the namespace does not exist,
	// Forbidden, Unauthorized, Invalid).
	exitConfig = 78
)

// exitError is an error with the status fencekit exits with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

// withCode gives err the exit status code; nil stays nil.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fencekit",
		Short: "Safe leader election on Kubernetes for workloads not written in Go",
		Long: `fencekit elects a leader on a Kubernetes Lease with fencekit's elector and hands the fencing token (the
epoch of the acquisition) to a program in any language: 'fencekit run' runs a command only while leading,
'fencekit elect' is a token sidecar. The program must present the epoch on every write, and the target
must refuse a stale one. See docs/run.md.`,
		Version:       version.Version + " (" + version.Commit + ")",
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(c *cobra.Command, _ []string) error {
			return errors.New("a command is required: run, elect, selftest or version (see 'fencekit --help')")
		},
	}
	root.SetVersionTemplate("fencekit {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newRunCommand(), newElectCommand(), newSelftestCommand(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(c *cobra.Command, _ []string) { fmt.Fprintf(c.OutOrStdout(), "fencekit %s\n", root.Version) },
	})
	for _, dev := range []string{"demo", "devcluster"} {
		root.AddCommand(&cobra.Command{
			Use: dev, Hidden: true, DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return fmt.Errorf("%q is a development command of fencekit-dev, which needs the repository: 'go run ./cmd/fencekit-dev %s' (make %s)", dev, dev, map[string]string{"demo": "demo", "devcluster": "run"}[dev])
			},
		})
	}
	return root
}

func main() {
	if spec, ok := os.LookupEnv(leadrun.WatchdogEnv); ok {
		// `fencekit run` started this process as its command's watchdog, reading from fd 3.
		os.Exit(leadrun.RunWatchdog(spec, os.NewFile(3, "watchdog")))
	}
	root := newRoot()
	c, err := root.ExecuteC()
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", c.CommandPath(), err)
	var ee *exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	// What cobra returns itself (an unknown command or flag, a wrong number of arguments) and what the
	// commands return without a status are usage errors.
	os.Exit(exitUsage)
}
