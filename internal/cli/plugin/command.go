package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/scheme"
	"github.com/fencekit/fencekit/internal/version"
)

const usage = `kubectl fencekit: fencekit's Leases, fenced resources and refusals

Usage:
  kubectl fencekit status [-n NAMESPACE | -A] [-o json] [--refusals N]
  kubectl fencekit explain OBJECT [-n NAMESPACE] [-o json] [--epoch N] [--requester USER]
  kubectl fencekit version

  status    the fenced Leases (holder, epoch, time to expiry, the holder's safe-work deadline assuming the
            elector's default drift and margin), the FencedResources bound to them and whether each is
            behind its Lease, and the latest refusals recorded by fencekit's webhooks
  explain   for OBJECT (fr/NAME, configmap/NAME, deployments.apps/NAME, ...): the Lease that fences it, and
            which writes would be admitted now and why the others would be refused (--epoch and
            --requester add a write presenting that epoch as that user)

Flags:
`

// Run runs the plugin with args (without the program name), reading the cluster through the kubeconfig
// flags of k8s.io/cli-runtime (--kubeconfig, --context, -n, --as, ...).
func Run(ctx context.Context, args []string, streams genericiooptions.IOStreams) error {
	fs := pflag.NewFlagSet("kubectl-fencekit", pflag.ContinueOnError)
	fs.SetOutput(streams.ErrOut)
	kube := genericclioptions.NewConfigFlags(true)
	kube.AddFlags(fs)
	output := fs.StringP("output", "o", "", "output format: empty for tables, json for scripts")
	all := fs.BoolP("all-namespaces", "A", false, "status: all namespaces")
	refusals := fs.Int("refusals", 10, "status: how many of the latest refusals to list")
	epoch := fs.Int64("epoch", 0, "explain: also judge a write presenting this epoch")
	requester := fs.String("requester", "", "explain: the user of the --epoch write (default: the Lease's acquirer)")
	fs.Usage = func() { fmt.Fprint(streams.ErrOut, usage+fs.FlagUsages()) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if *output != "" && *output != "json" {
		return fmt.Errorf("unknown output format %q: want json, or none for tables", *output)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("no command: want status, explain or version")
	}
	if rest[0] == "version" {
		_, err := fmt.Fprintf(streams.Out, "kubectl-fencekit %s (%s)\n", version.Version, version.Commit)
		return err
	}
	cfg, err := kube.ToRESTConfig()
	if err != nil {
		return err
	}
	mapper, err := kube.ToRESTMapper()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New(), Mapper: mapper})
	if err != nil {
		return err
	}
	ns, _, err := kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return err
	}
	now := clock.RealClock{}.Now()
	switch rest[0] {
	case "status":
		if len(rest) != 1 {
			return fmt.Errorf("status takes no arguments, got %q", strings.Join(rest[1:], " "))
		}
		if *all {
			ns = ""
		}
		report, err := Status(ctx, c, ns, *refusals, now)
		if err != nil {
			return err
		}
		return write(streams.Out, *output, report, func(w io.Writer) error { return report.WriteTables(w, now) })
	case "explain":
		if len(rest) != 2 {
			return fmt.Errorf("explain takes one OBJECT (fr/NAME, configmap/NAME, ...), got %d arguments", len(rest)-1)
		}
		e, err := Explain(ctx, c, mapper, ns, rest[1], Extra{Epoch: *epoch, Requester: *requester}, now)
		if err != nil {
			return err
		}
		return write(streams.Out, *output, e, func(w io.Writer) error { return e.WriteText(w, now) })
	default:
		fs.Usage()
		return fmt.Errorf("unknown command %q: want status, explain or version", rest[0])
	}
}

func write(w io.Writer, output string, v any, tables func(io.Writer) error) error {
	if output == "json" {
		return writeJSON(w, v)
	}
	return tables(w)
}

// relative renders t relative to now, to a tenth of a second: "in 12.3s", "3s ago", "now".
func relative(t, now time.Time) string {
	switch d := t.Sub(now).Round(100 * time.Millisecond); {
	case d > 0:
		return "in " + d.String()
	case d < 0:
		return (-d).String() + " ago"
	default:
		return "now"
	}
}
