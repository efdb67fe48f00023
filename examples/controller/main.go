// Command controller is fencekit's example operator: a kubebuilder-style controller-runtime operator that
// renders a "source" ConfigMap (label example.fencekit.io/source=true) into a ConfigMap, a Deployment (and
// its status) and an optional canary Deployment, made safe against a paused leader with one line:
//
//	mgr, err = managed.FenceEachTerm(mgr, elector.Config{Namespace: ns, Name: "configsync"}, setup)
//
// where setup calls SetupWithManager: the controller is built for each term, so that a lost Lease stops it
// and the process stands by and leads again without a restart. Everything else is what kubebuilder
// scaffolds: ctrl.NewManager, SetupWithManager, mgr.Start. The objects are fenced in the apiserver by a
// FencingPolicy naming the same Lease (see config.yaml).
//
// The flags below the first three exist so that `fencekit-dev demo --scenario controller` and its end-to-end
// test (test/e2e TestControllerScenario, internal/dev/demo.RunController) can drive it: short timings,
// --pause-on-round (hold the writes in the middle of a reconcile until the process has been stopped and
// continued from outside, as a GC pause could stop it) and --unfenced (the same operator with controller-runtime's own leader
// election and no fencing, to show what goes wrong). It logs one JSON object per line on stdout.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/managed"
)

type options struct {
	elector      elector.Config // the Lease, the identity and the timings, from the flags
	pauseOnRound string
	unfenced     bool
}

var log = slog.New(slog.NewJSONHandler(os.Stdout, nil))

func main() {
	// The Lease's namespace is also the namespace reconciled; the FencingPolicy names the Lease too.
	o := options{elector: elector.Config{Namespace: "default", Name: "configsync"}}
	o.elector.BindFlags(flag.CommandLine)
	flag.StringVar(&o.pauseOnRound, "pause-on-round", "", "Demonstration only: in the middle of the reconcile of this round, after each of its writes took its token and before any is sent, log \"pausing\" and wait until the process has been stopped (SIGSTOP) and continued (SIGCONT) from outside.")
	flag.BoolVar(&o.unfenced, "unfenced", false, "Run without fencekit: controller-runtime's own leader election and a plain client.")
	flag.Parse()
	if err := run(o); err != nil {
		log.Error("operator failed", "error", err.Error())
		os.Exit(1)
	}
}

func run(o options) error {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = fencingv1alpha1.AddToScheme(scheme) // fence-on-acquire reads the FencingPolicies
	mopts := ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{o.elector.Namespace: {}}},
	}
	if o.pauseOnRound != "" {
		mopts.NewClient = pausingClient(o.pauseOnRound)
	}
	if o.unfenced {
		mopts.LeaderElection, mopts.LeaderElectionID, mopts.LeaderElectionNamespace = true, o.elector.Name, o.elector.Namespace
		mopts.LeaseDuration, mopts.RenewDeadline, mopts.RetryPeriod = &o.elector.LeaseDuration, &o.elector.RenewDeadline, &o.elector.RetryPeriod
		mopts.LeaderElectionReleaseOnCancel = true
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), mopts)
	if err != nil {
		return err
	}
	setup := func(m ctrl.Manager) error { return (&Reconciler{Client: m.GetClient()}).SetupWithManager(m) }
	if o.unfenced {
		go func() { <-mgr.Elected(); log.Info("leading", "holder", "unfenced") }()
		if err := setup(mgr); err != nil {
			return err
		}
	} else {
		// Before leadership is reported, every declared object is raised to the new epoch, by a client of
		// the hook's own without client-side rate limiting (one patch per object, within the PostAcquire
		// timeout whatever QPS the manager's config has).
		var fence elector.AcquireFence
		fence, err = fencing.FenceObjectsOnAcquireForConfig(mgr.GetConfig())
		if err != nil {
			return err
		}
		cfg := o.elector
		// The fence declares itself on the Lease: the webhook admits the writes from its copy of it.
		cfg.PostAcquire, cfg.OnStartedLeading = fence, logLeading
		// The one call: the controller under the fencekit elector, built anew for each term, with a fenced
		// GetClient(); a lost Lease stops it and the process stands by for the next term.
		mgr, err = managed.FenceEachTerm(mgr, cfg, setup)
		if err != nil {
			return err
		}
	}
	err = mgr.Start(ctrl.SetupSignalHandler())
	paused.drain(15 * time.Second)
	return err
}

func logLeading(_ context.Context, t elector.Token) {
	log.Info("leading", "holder", t.Holder, "epoch", t.Epoch)
}
