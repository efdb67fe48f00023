package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/fencekit/fencekit/internal/leadrun"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// electorFlags are the flags `fencekit run` and `fencekit elect` share.
type electorFlags struct {
	kubeconfig, namespace, lease, identity string
	cfg                                    elector.Config
	fenceOnAcquire                         bool
}

func (f *electorFlags) register(fs *flag.FlagSet) {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "default"
	}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the pod's ServiceAccount).")
	fs.StringVar(&f.namespace, "namespace", ns, "Namespace of the Lease (default: $POD_NAMESPACE, else default).")
	fs.StringVar(&f.lease, "lease", "", "Name of the Lease to elect on (required).")
	fs.StringVar(&f.identity, "identity", "", "Holder identity (default: $POD_NAME or the hostname, plus a random suffix).")
	fs.DurationVar(&f.cfg.LeaseDuration, "lease-duration", elector.DefaultLeaseDuration, "Lease duration.")
	fs.DurationVar(&f.cfg.RenewDeadline, "renew-deadline", elector.DefaultRenewDeadline, "Renew deadline.")
	fs.DurationVar(&f.cfg.RetryPeriod, "retry-period", elector.DefaultRetryPeriod, "Retry period.")
	fs.DurationVar(&f.cfg.SafetyMargin, "safety-margin", elector.DefaultSafetyMargin, "Safety margin of the safe-work deadline.")
	fs.BoolVar(&f.fenceOnAcquire, "fence-on-acquire", true, "Raise the FencedResources bound to the Lease to the new epoch before leading, and declare it on the Lease (annotation fencing.fencekit.io/fences), which lets fencekit's webhook admit writes without a quorum read; once a Lease declares it, an elector with --fence-on-acquire=false cannot take it.")
}

// config builds the elector's configuration from the flags.
func (f *electorFlags) config() (elector.Config, error) {
	if f.lease == "" {
		return elector.Config{}, errors.New("--lease is required")
	}
	var rc *rest.Config
	var err error
	if f.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		rc, err = ctrl.GetConfig()
	}
	if err != nil {
		return elector.Config{}, fmt.Errorf("finding the cluster: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return elector.Config{}, err
	}
	cfg := f.cfg
	cfg.Client, cfg.Namespace, cfg.Name, cfg.Identity = cs, f.namespace, f.lease, f.identity
	if f.fenceOnAcquire {
		// Its own client, without rc's client-side rate limit (client-go's 5 QPS when --kubeconfig is
		// given): 100 bound resources must be fenced within the PostAcquire timeout.
		cfg.PostAcquire, err = fencing.FenceOnAcquireForConfig(rc)
		if err != nil {
			return elector.Config{}, err
		}
		// Declared on the Lease: fencekit's webhook then admits the workload's writes at the current epoch
		// from its copy of the Lease, without a quorum read per write.
		cfg.PostAcquireFences = elector.Fences{FencedResources: true}
	}
	return cfg, nil
}

// runCommand is `fencekit run [flags] -- CMD ARGS...`.
func runCommand(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: fencekit run --lease NAME [flags] -- CMD [ARGS...]

Waits until this process leads the Lease, then runs CMD with the fencing token in its environment:
FENCEKIT_EPOCH (present it on every write), FENCEKIT_LEASE, FENCEKIT_HOLDER and FENCEKIT_FIELD_MANAGER
(kubectl --field-manager for fenced Kubernetes writes). CMD gets SIGTERM when the safe-work deadline passes
or leadership is lost, and SIGKILL after --grace. Exits with CMD's status (128+N if signal N ended it) and
releases the Lease.

Flags:
`)
		fs.PrintDefaults()
	}
	var f electorFlags
	f.register(fs)
	grace := fs.Duration("grace", leadrun.DefaultGrace, "Time CMD has to exit after SIGTERM before SIGKILL.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("no command given after --")
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = ctrl.LoggerInto(ctx, zap.New(zap.WriteTo(os.Stderr)))
	err = leadrun.Run(ctx, cfg, leadrun.Command{Args: fs.Args(), Grace: *grace})
	var ee *leadrun.ExitError
	if errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "fencekit run: %v\n", ee)
		os.Exit(ee.Code)
	}
	return err
}

// runElect is `fencekit elect --serve ADDR`: the token sidecar.
func runElect(args []string) error {
	fs := flag.NewFlagSet("elect", flag.ExitOnError)
	var f electorFlags
	f.register(fs)
	serve := fs.String("serve", "127.0.0.1:8379", "Address to serve the token on: GET /token (JSON; ?watch=EPOCH long-polls a change), /readyz (200 while leading), /healthz.")
	tokenFile := fs.String("token-file", "", "File rewritten with the token (JSON) at every change; empty for none.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", *serve)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = ctrl.LoggerInto(ctx, zap.New(zap.WriteTo(os.Stderr)))
	s := &leadrun.Sidecar{TokenFile: *tokenFile}
	return s.Run(ctx, cfg, l)
}
