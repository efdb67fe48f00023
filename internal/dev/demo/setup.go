package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/internal/dev/devcluster"
	"github.com/fencekit/fencekit/internal/operator"
	fkscheme "github.com/fencekit/fencekit/internal/scheme"
)

// Build builds the main package pkg (a path relative to the repository at root, such as ./cmd/fencekit) into
// dir, as a static binary named after pkg's last element, and returns the binary's path.
func Build(root, dir, pkg string) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", strings.TrimPrefix(pkg, "./"), err, out)
	}
	return bin, nil
}

// Local starts a local control plane with fencekit installed (CRDs, webhook, Lease policy, elector role)
// and the operator running in this process, and returns a Target in a fresh namespace whose two fenced
// workers are distinct users bound to the fencekit-elector role. stop tears everything down.
func Local(ctx context.Context, root string, progress io.Writer) (t *Target, stop func(), err error) {
	var cleanups []func()
	teardown := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	// On failure the return statement has already set stop to nil: tear down with the local function.
	defer func() {
		if err != nil {
			teardown()
		}
	}()
	assets, err := devcluster.AssetsDir(root, false)
	if err != nil {
		return nil, nil, err
	}
	fmt.Fprintln(progress, "starting a local control plane (kube-apiserver and etcd from", assets+") and installing fencekit: CRD, admission webhook, Lease policy, fencekit-elector role")
	cluster, err := devcluster.Start(ctx, devcluster.Options{RepoRoot: root, AssetsDir: assets, Webhooks: true})
	if err != nil {
		return nil, nil, err
	}
	cleanups = append(cleanups, func() { _ = cluster.Stop() })

	stopOperator, err := operator.Start(ctx, cluster.Config, operator.Options{
		MetricsAddr: "0", ProbeAddr: "0",
		WebhookHost: cluster.WebhookHost, WebhookPort: cluster.WebhookPort, WebhookCertDir: cluster.WebhookCertDir,
	})
	if err != nil {
		return nil, nil, err
	}
	cleanups = append(cleanups, func() { _ = stopOperator() })
	fmt.Fprintln(progress, "operator running (webhook and controllers, in this process)")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fencekit-demo"}}
	if err := cluster.Client.Create(ctx, ns); err != nil {
		return nil, nil, err
	}
	t = &Target{Namespace: ns.Name, UnfencedKubeconfig: cluster.Kubeconfig, W1User: "fencekit-demo-w1"}
	for i, kc := range []*string{&t.W1Kubeconfig, &t.W2Kubeconfig} {
		user := fmt.Sprintf("fencekit-demo-w%d", i+1)
		if *kc, err = cluster.UserKubeconfig(user); err != nil {
			return nil, nil, err
		}
		if err := devcluster.BindElector(ctx, cluster.Client, ns.Name, user); err != nil {
			return nil, nil, err
		}
	}
	if t.Admin, err = client.NewWithWatch(cluster.Config, client.Options{Scheme: fkscheme.New()}); err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "fencekit-demo-")
	if err != nil {
		return nil, nil, err
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
	fmt.Fprintln(progress, "building examples/worker")
	if t.WorkerBinary, err = Build(root, dir, "./examples/worker"); err != nil {
		return nil, nil, err
	}
	return t, teardown, nil
}

// Existing returns a Target on the cluster of kubeconfig, where fencekit was installed with Helm: a fresh
// namespace, deleted by stop; both fenced workers and the control run use kubeconfig's user.
func Existing(ctx context.Context, root, kubeconfig string) (t *Target, stop func(), err error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	admin, err := client.NewWithWatch(cfg, client.Options{Scheme: fkscheme.New()})
	if err != nil {
		return nil, nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fencekit-demo-"}}
	if err := admin.Create(ctx, ns); err != nil {
		return nil, nil, fmt.Errorf("creating the demo namespace (is fencekit installed, and may this user create namespaces?): %w", err)
	}
	dir, err := os.MkdirTemp("", "fencekit-demo-")
	if err != nil {
		return nil, nil, err
	}
	stop = func() {
		_ = admin.Delete(context.Background(), ns)
		_ = os.RemoveAll(dir)
	}
	bin, err := Build(root, dir, "./examples/worker")
	if err != nil {
		stop()
		return nil, nil, err
	}
	return &Target{Namespace: ns.Name, Admin: admin, W1Kubeconfig: kubeconfig, W2Kubeconfig: kubeconfig,
		UnfencedKubeconfig: kubeconfig, WorkerBinary: bin}, stop, nil
}

var errNotShown = errors.New("the demo did not show what it should")
