package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/dev/demo"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/kubeconfig"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// exampleRules is what examples/controller needs in its namespace besides the fencekit-elector role:
// the ConfigMaps it reads and renders, the Deployments and their status, and reading the FencingPolicies
// (fence-on-acquire lists them).
var exampleRules = []rbacv1.PolicyRule{
	All("", "configmaps"),
	All("apps", "deployments", "deployments/status"),
	{APIGroups: []string{fencingv1alpha1.GroupVersion.Group}, Resources: []string{"fencingpolicies"}, Verbs: []string{"get", "list", "watch"}},
}

// TestExampleControllerRollsOut: examples/controller (managed.Fence, fencing.NewClient), run as its own
// process under the FencingPolicy of its config.yaml, renders Deployments that the deployment controller
// rolls out, scales and whose status it writes, next to the operator's own status condition, while the
// policy is Ready; the canary it deletes is gone. Once it stopped (and released the Lease), a replica
// that takes the Lease over makes its epoch stale: a write at it is refused.
func TestExampleControllerRollsOut(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	w := env.NewWorker(t, ns, "configsync")
	env.Grant(t, ns, "configsync", exampleRules, w.User)
	policy := examplePolicy(t)
	policy.Namespace = ns
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatalf("applying examples/controller/config.yaml: %v", err)
	}
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe", Labels: map[string]string{"example.fencekit.io/rendered": "true"}}}
	testenv.Eventually(t, "the webhook refuses an unfenced write of a rendered ConfigMap", func() (bool, string) {
		err := env.Client.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return fencing.IsTokenMissing(err), testenv.ErrString(err)
	})
	bin, err := demo.Build(testenv.RepoRoot(), t.TempDir(), "./examples/controller")
	if err != nil {
		t.Fatal(err)
	}
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"example.fencekit.io/source": "true"}},
		Data: map[string]string{"round": "1", "replicas": "2", "canary": "true", "message": "round 1"}}
	if err := env.Client.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	stop := startExample(t, bin, kubeconfig.ForTest(t, w.Config), ns, "configsync-a")

	web := types.NamespacedName{Namespace: ns, Name: "web"}
	canary := types.NamespacedName{Namespace: ns, Name: "web-canary"}
	RolledOut(t, env, canary, "1", 1)
	RolledOut(t, env, web, "1", 2)
	EventuallyObject(t, env, 60*time.Second, web, "the operator's Rendered condition is in Deployment web's status next to the deployment controller's", func(d *appsv1.Deployment) (bool, string) {
		var rendered, progressing bool
		for _, c := range d.Status.Conditions {
			rendered = rendered || c.Type == "Rendered" && c.Reason == "Round1"
			progressing = progressing || c.Type == appsv1.DeploymentProgressing
		}
		return rendered && progressing, fmt.Sprintf("conditions %v", d.Status.Conditions)
	})
	// Declaring Deployments refuses the horizontal Pod autoscaler's scale (a replica count is the holder's),
	// and the policy says so; no other controller is refused: the rollout above went through.
	EventuallyObject(t, env, testenv.EventuallyTimeout, client.ObjectKeyFromObject(policy), "FencingPolicy configsync is Ready and refuses no controller but the autoscaler", func(p *fencingv1alpha1.FencingPolicy) (bool, string) {
		refused := meta.FindStatusCondition(p.Status.Conditions, fencingv1alpha1.ConditionControllersRefused)
		onlyAutoscaler := refused == nil || refused.Status != metav1.ConditionTrue ||
			strings.Count(refused.Message, " is refused") == 1 && strings.Contains(refused.Message, "horizontal Pod autoscaler")
		return meta.IsStatusConditionTrue(p.Status.Conditions, fencingv1alpha1.ConditionReady) && onlyAutoscaler,
			fmt.Sprintf("conditions %v", p.Status.Conditions)
	})

	src.Data = map[string]string{"round": "2", "replicas": "3", "canary": "false", "message": "round 2"}
	if err := env.Client.Update(ctx, src); err != nil {
		t.Fatal(err)
	}
	if d := RolledOut(t, env, web, "1", 3); d.Annotations["example.fencekit.io/round"] != "2" {
		t.Errorf("Deployment web's round is %q, want 2", d.Annotations["example.fencekit.io/round"])
	}
	testenv.EventuallyWithin(t, 60*time.Second, "the operator deletes the canary", func() (bool, string) {
		err := env.Client.Get(ctx, canary, &appsv1.Deployment{})
		return apierrors.IsNotFound(err), testenv.ErrString(err)
	})

	stop()
	var l coordinationv1.Lease
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: policy.Spec.LeaseName}, &l); err != nil {
		t.Fatal(err)
	}
	epoch, err := strconv.ParseInt(l.Annotations[protocol.EpochAnnotation], 10, 64)
	if err != nil {
		t.Fatalf("Lease %s after the operator stopped: %v", l.Name, err)
	}
	if holder := l.Spec.HolderIdentity; holder != nil && *holder != "" {
		t.Errorf("Lease %s is held by %q after the operator stopped, want it released", l.Name, *holder)
	}
	w.Holder = "configsync-a"
	h := HolderOf(env, ns, policy.Spec.LeaseName, w, elector.Token{Epoch: epoch, Lease: client.ObjectKeyFromObject(&l), Holder: w.Holder})
	h.TakeOver(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: web.Name}})
}

// examplePolicy is the FencingPolicy of examples/controller/config.yaml.
func examplePolicy(t *testing.T) *fencingv1alpha1.FencingPolicy {
	t.Helper()
	path := filepath.Join(testenv.RepoRoot(), "examples", "controller", "config.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p fencingv1alpha1.FencingPolicy
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &p
}

// startExample runs examples/controller's binary as holder identity in ns with kubeconfig, its output in
// a file that the test's log shows if the test fails. stop sends SIGTERM (the operator releases its
// Lease) and waits until it has exited; it also runs when the test ends.
func startExample(t *testing.T, bin, kubeconfig, ns, identity string) (stop func()) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "controller.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--namespace="+ns, "--identity="+identity)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting examples/controller: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Errorf("examples/controller: %v", err)
			} else if err != nil {
				t.Errorf("examples/controller exited with %v after SIGTERM", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited //nolint:errcheck // killed: its exit status says so
			t.Errorf("examples/controller did not exit within 30 s of SIGTERM: killed")
		}
		_ = out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("examples/controller's output:\n%s", b)
		}
	}
	t.Cleanup(stop)
	return stop
}
