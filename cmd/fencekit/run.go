package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fencekit/fencekit/internal/cli/leadrun"
)

// logger is fencekit's log: JSON lines on stderr, without stack traces (an error is one line). client-go's
// own logs (klog) go there too.
func logger() logr.Logger {
	log := zap.New(zap.WriteTo(os.Stderr), zap.StacktraceLevel(zapcore.PanicLevel))
	klog.SetLogger(log)
	return log
}

// signalContext ends at SIGTERM or Ctrl-C and carries the logger.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctrl.LoggerInto(ctx, logger()), stop
}

// electionError gives the election's failures before leading their exit status.
func electionError(err error) error {
	var pe *leadrun.PermanentError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return withCode(exitConfig, err)
	case errors.Is(err, leadrun.ErrNotAcquired):
		return withCode(exitNotAcquired, err)
	}
	return withCode(exitFailed, err)
}

func newRunCommand() *cobra.Command {
	var f electorFlags
	grace := leadrun.DefaultGrace
	onLoss := "exit"
	c := &cobra.Command{
		Use:   "run --lease NAME [flags] -- CMD [ARGS...]",
		Short: "Run a command only while leading a Lease, with the fencing token in its environment",
		Long: `Waits until this process leads the Lease, then runs CMD with the fencing token in its environment:
FENCEKIT_EPOCH (present it on every write), FENCEKIT_LEASE, FENCEKIT_HOLDER and FENCEKIT_FIELD_MANAGER
(kubectl --field-manager for fenced Kubernetes writes). CMD's whole process tree (its process group and
every descendant, setsid ones included) gets SIGTERM when the term ends (SIGTERM to fencekit run, no
renewal in time, the safe-work deadline passed) and SIGKILL after --grace or at the safe-work deadline,
whichever is sooner; SIGKILL at once when the Lease names another holder. What CMD leaves running when it
exits is stopped the same way. Then it
releases the Lease, once the tree is gone, and exits with CMD's status (128+N if signal N ended it): it
runs CMD once. With --on-loss=again, a term that ends while CMD runs (leadership lost, the safe-work
deadline passed) is followed, once the tree is gone, by a new competition, and CMD runs again on each new
term, with that term's FENCEKIT_EPOCH; fencekit run still exits when CMD exits on its own. A watchdog
process kills the tree at the safe-work deadline if fencekit run cannot (paused, starved of CPU, killed).

fencekit's own failures exit 64 (usage), 75 (not acquired within --timeout), 78 (setup: no cluster, or
the apiserver refuses the election permanently) or 1; see docs/run.md.`,
		Example: `  fencekit run --lease orders-writer -- ./sync-orders.sh
  fencekit run --lease orders-writer --timeout 30s -- sh -c 'psql -v epoch="$FENCEKIT_EPOCH" -f sync.sql'`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("no command given: fencekit run --lease NAME [flags] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if onLoss != "exit" && onLoss != "again" {
				return withCode(exitUsage, fmt.Errorf("--on-loss=%q: want exit (end when a term ends) or again (run CMD again on the next term)", onLoss))
			}
			cfg, err := f.config(c.Flags())
			if err != nil {
				return err
			}
			ctx, stop := signalContext()
			defer stop()
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("finding fencekit's own binary for the command's watchdog: %w", err)
			}
			err = leadrun.Run(ctx, cfg, leadrun.Command{Args: args, Grace: grace, AcquireTimeout: f.timeout, Subreaper: true, Watchdog: self,
				Again: onLoss == "again"})
			var ee *leadrun.ExitError
			if errors.As(err, &ee) {
				return withCode(ee.Code, ee)
			}
			return electionError(err)
		},
	}
	c.Flags().SetInterspersed(false) // flags after CMD are CMD's
	f.register(c.Flags())
	c.Flags().StringVar(&onLoss, "on-loss", onLoss, "What a term that ends while CMD runs ends: exit (fencekit run exits with CMD's status) or again (stand by, and run CMD again on the next term).")
	c.Flags().DurationVar(&grace, "grace", leadrun.DefaultGrace, "Time CMD's process tree has to exit after SIGTERM before SIGKILL (at most until the safe-work deadline: the Lease is not renewed meanwhile).")
	return c
}

func newElectCommand() *cobra.Command {
	var f electorFlags
	var serve, tokenFile string
	c := &cobra.Command{
		Use:   "elect --lease NAME [--serve ADDR] [--token-file PATH] [flags]",
		Short: "The token sidecar: elect on a Lease and serve the fencing token over HTTP and in a file",
		Long: `Elects on the Lease for as long as it runs and publishes the current token to the pod's other
containers: on --serve (GET /token, JSON: 200 while leading, 503 when not; ?watch=EPOCH long-polls a
change), in --token-file, GET /leader (200 while leading), GET /readyz (200 while the election runs and
the apiserver answers it, whoever leads: a rolling update does not stall on it) and GET /healthz.

fencekit's own failures exit 64 (usage), 75 (not acquired within --timeout), 78 (setup: no cluster, an
address that cannot be listened on, or the apiserver refuses the election permanently) or 1; see
docs/run.md.`,
		Example: `  fencekit elect --lease orders-writer --serve :8379 --token-file /var/run/fencekit/token.json`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := f.config(c.Flags())
			if err != nil {
				return err
			}
			l, err := net.Listen("tcp", serve)
			if err != nil {
				return withCode(exitConfig, fmt.Errorf("--serve %s: %w", serve, err))
			}
			ctx, stop := signalContext()
			defer stop()
			s := &leadrun.Sidecar{TokenFile: tokenFile, AcquireTimeout: f.timeout}
			return electionError(s.Run(ctx, cfg, l))
		},
	}
	f.register(c.Flags())
	c.Flags().StringVar(&serve, "serve", "127.0.0.1:8379", "Address to serve on: GET /token, /leader, /readyz, /healthz.")
	c.Flags().StringVar(&tokenFile, "token-file", "", "File rewritten with the token (JSON) at every change; empty for none.")
	return c
}
