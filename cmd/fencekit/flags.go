package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencekit/fencekit/internal/cli/leadrun"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
)

// electorFlags are the flags `fencekit run` and `fencekit elect` share.
type electorFlags struct {
	kubeconfig     string
	cfg            elector.Config // --namespace, --lease, --identity and the timings
	fenceOnAcquire bool
	timeout        time.Duration
}

func (f *electorFlags) register(fs *pflag.FlagSet) {
	f.cfg.Namespace = os.Getenv("POD_NAMESPACE")
	if f.cfg.Namespace == "" {
		f.cfg.Namespace = "default"
	}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the pod's ServiceAccount).")
	efs := flag.NewFlagSet("elector", flag.ContinueOnError)
	f.cfg.BindFlags(efs)
	fs.AddGoFlagSet(efs)
	fs.Lookup("namespace").Usage = "Namespace of the Lease ($POD_NAMESPACE when set)."
	fs.Lookup("lease").Usage = "Name of the Lease to elect on (required)."
	fs.DurationVar(&f.timeout, "timeout", 0, "Give up (exit 75) when the Lease is not acquired within this time; 0 waits for ever.")
	fs.BoolVar(&f.fenceOnAcquire, "fence-on-acquire", true, "Raise the FencedResources bound to the Lease to the new epoch before leading, and declare it on the Lease (annotation fencing.fencekit.io/fences), which lets fencekit's webhook admit writes without a quorum read; once a Lease declares it, an elector with --fence-on-acquire=false cannot take it.")
}

// noNegativeDurations refuses a negative value of any duration flag of fs.
func noNegativeDurations(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(fl *pflag.Flag) {
		if fl.Value.Type() != "duration" || err != nil {
			return
		}
		if d, perr := time.ParseDuration(fl.Value.String()); perr == nil && d < 0 {
			err = fmt.Errorf("--%s %s is negative: a duration must be 0 or more", fl.Name, fl.Value)
		}
	})
	return err
}

// config checks the flags and builds the elector's configuration: a usage error (exit 64) for a bad
// flag, a setup error (exit 78) when the cluster cannot be found.
func (f *electorFlags) config(fs *pflag.FlagSet) (elector.Config, error) {
	if err := noNegativeDurations(fs); err != nil {
		return elector.Config{}, withCode(exitUsage, err)
	}
	if err := leadrun.ValidateLease(f.cfg.Namespace, f.cfg.Name); err != nil {
		return elector.Config{}, withCode(exitUsage, err)
	}
	var rc *rest.Config
	var err error
	if f.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		rc, err = ctrl.GetConfig()
	}
	switch {
	case err != nil && f.kubeconfig != "":
		return elector.Config{}, withCode(exitConfig, fmt.Errorf("finding the cluster in --kubeconfig %s: %w", f.kubeconfig, err))
	case err != nil:
		// client-go's own message names KUBERNETES_MASTER, which is not how a fencekit user says it.
		return elector.Config{}, withCode(exitConfig, fmt.Errorf("finding the cluster: no --kubeconfig, no $KUBECONFIG, no ~/.kube/config and not in a pod (%w)", err))
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return elector.Config{}, withCode(exitConfig, err)
	}
	cfg := f.cfg
	cfg.Client = cs
	if f.fenceOnAcquire {
		// Its own client, without rc's client-side rate limit (client-go's 5 QPS when --kubeconfig is
		// given): 100 bound resources must be fenced within the PostAcquire timeout.
		// The fence declares itself on the Lease: fencekit's webhook then admits the workload's writes at
		// the current epoch from its copy of the Lease, without a quorum read per write.
		cfg.PostAcquire, err = fencing.FenceOnAcquireForConfig(rc)
		if err != nil {
			return elector.Config{}, withCode(exitConfig, err)
		}
	}
	// The timings are checked as the elector checks them, before anything is started.
	if _, err := elector.New(cfg); err != nil {
		// Every problem the elector found, on the one line a failure of fencekit's gets.
		return elector.Config{}, withCode(exitUsage, errors.New(strings.ReplaceAll(err.Error(), "\n", "; ")))
	}
	return cfg, nil
}
