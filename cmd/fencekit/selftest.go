package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/cli/leadrun"
	fkscheme "github.com/fencekit/fencekit/internal/scheme"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// newSelftestCommand is `fencekit selftest`, the chart's `helm test`: as the pod's ServiceAccount (bound
// to the elector role), it elects twice on --lease and writes --resource (bound to that Lease) with both
// tokens. The write with the previous epoch must be refused by fencekit's admission webhook as stale, the
// write with the current epoch admitted and stored. It exits non-zero, naming the step, if any of that fails.
func newSelftestCommand() *cobra.Command {
	var kubeconfig, namespace, lease, resource string
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "selftest --namespace NS --lease NAME --resource NAME [flags]",
		Short: "Check an installation (the chart's helm test): a stale write refused by the webhook, a current one admitted",
		Long: `Elects twice on --lease and writes --resource (a FencedResource bound to that Lease) with both tokens:
the write with the previous epoch must be refused by fencekit's admission webhook as stale, the write with
the current epoch admitted and stored. Exits 1, naming the step, if any of that fails.`,
		Example: `  fencekit selftest --namespace fencekit-test --lease selftest --resource selftest`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := noNegativeDurations(c.Flags()); err != nil {
				return withCode(exitUsage, err)
			}
			if namespace == "" || resource == "" {
				return withCode(exitUsage, errors.New("--namespace, --lease and --resource are required"))
			}
			if err := leadrun.ValidateLease(namespace, lease); err != nil {
				return withCode(exitUsage, err)
			}
			var rc *rest.Config
			var err error
			if kubeconfig != "" {
				rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
			} else {
				rc, err = ctrl.GetConfig()
			}
			if err != nil {
				return withCode(exitConfig, fmt.Errorf("finding the cluster: %w", err))
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			return withCode(exitFailed, selftest(ctx, rc, types.NamespacedName{Namespace: namespace, Name: resource}, lease))
		},
	}
	c.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the pod's ServiceAccount).")
	c.Flags().StringVar(&namespace, "namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the Lease and the FencedResource (default: $POD_NAMESPACE).")
	c.Flags().StringVar(&lease, "lease", "", "Lease to elect on (required).")
	c.Flags().StringVar(&resource, "resource", "", "FencedResource bound to --lease, to write (required).")
	c.Flags().DurationVar(&timeout, "timeout", time.Minute, "Time the whole check may take.")
	return c
}

func selftest(ctx context.Context, rc *rest.Config, key types.NamespacedName, lease string) error {
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	c, err := client.New(rc, client.Options{Scheme: fkscheme.New()})
	if err != nil {
		return err
	}
	// The first leadership, released at once: its token becomes stale when the second acquisition raises
	// the epoch.
	old, release, err := lead(ctx, cs, key.Namespace, lease, "selftest-previous")
	if err != nil {
		return err
	}
	release()
	current, release, err := lead(ctx, cs, key.Namespace, lease, "selftest-current")
	if err != nil {
		return err
	}
	defer release()
	if current.Epoch <= old.Epoch {
		return fmt.Errorf("the second acquisition of Lease %s/%s took epoch %d, not above the first's %d", key.Namespace, lease, current.Epoch, old.Epoch)
	}
	fmt.Printf("elected twice on Lease %s/%s: epochs %d and %d\n", key.Namespace, lease, old.Epoch, current.Epoch)

	w := fencing.NewWriter(c)
	_, err = w.Set(ctx, old, key, map[string]any{"selftest": "stale"})
	if err == nil {
		return fmt.Errorf("a write to FencedResource %s with the previous epoch %d (the Lease is at %d) was admitted: fencekit's webhook does not fence", key, old.Epoch, current.Epoch)
	}
	if !refusedByWebhook(err, protocol.ReasonStale) {
		return fmt.Errorf("a write to FencedResource %s with the previous epoch %d was refused, but not by fencekit's webhook as stale: %w", key, old.Epoch, err)
	}
	fmt.Printf("the write with the previous epoch %d was refused by the webhook: %v\n", old.Epoch, err)

	written, err := w.Set(ctx, current, key, map[string]any{"selftest": "current"})
	if err != nil {
		return fmt.Errorf("the write to FencedResource %s with the current epoch %d was refused: %w", key, current.Epoch, err)
	}
	if written.Spec.Epoch != current.Epoch {
		return fmt.Errorf("FencedResource %s stores epoch %d after the write with epoch %d", key, written.Spec.Epoch, current.Epoch)
	}
	fmt.Printf("the write with the current epoch %d was admitted\nselftest passed\n", current.Epoch)
	return nil
}

// lead acquires the Lease as identity and returns its token and a function that releases it.
func lead(ctx context.Context, cs kubernetes.Interface, namespace, lease, identity string) (elector.Token, func(), error) {
	tokens := make(chan elector.Token, 1)
	e, err := elector.New(elector.Config{
		Client: cs, Namespace: namespace, Name: lease, Identity: identity,
		LeaseDuration: 5 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		SafetyMargin: 500 * time.Millisecond, ReleaseOnCancel: ptr.To(true),
		OnStartedLeading: func(ctx context.Context, t elector.Token) {
			tokens <- t
			<-ctx.Done()
		},
	})
	if err != nil {
		return elector.Token{}, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	release := func() {
		cancel()
		<-done //nolint:errcheck // after cancel, Run's error only says that it was cancelled
	}
	select {
	case t := <-tokens:
		return t, release, nil
	case err := <-done:
		cancel()
		return elector.Token{}, nil, fmt.Errorf("electing on Lease %s/%s as %s: %w", namespace, lease, identity, err)
	case <-ctx.Done():
		release()
		return elector.Token{}, nil, fmt.Errorf("the Lease %s/%s was not acquired as %s in time (RBAC, the Lease policy, another holder?): %w", namespace, lease, identity, ctx.Err())
	}
}

// refusedByWebhook reports whether err is the API error of fencekit's admission webhook with reason: its
// causes carry the reason as their type (the CRD's own epoch rule answers with a field error instead).
func refusedByWebhook(err error, reason protocol.Reason) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if string(c.Type) == string(reason) {
			return true
		}
	}
	return false
}
