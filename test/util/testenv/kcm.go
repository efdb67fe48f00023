package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControllerManagerUser is the user kube-controller-manager authenticates as (by impersonation: envtest
// keeps no client CA key, so no certificate can be minted for it). With per-controller credentials it only
// creates the controllers' ServiceAccounts and their tokens; each controller then writes as
// system:serviceaccount:kube-system:<controller> (generic-garbage-collector, namespace-controller, ...).
const ControllerManagerUser = "system:kube-controller-manager"

// ControllerManagerStartTimeout bounds how long StartControllerManager waits for the controllers to run.
const ControllerManagerStartTimeout = 90 * time.Second

// ControllerManager is the real kube-controller-manager running against an Env's apiserver, with every
// controller (--controllers=*) and no leader election. No kubelet runs: no Pod ever starts, but
// Deployments, ReplicaSets, Jobs, PVC binding, garbage collection and namespace deletion all work.
type ControllerManager struct {
	// Port is its secure port on 127.0.0.1 (/healthz).
	Port int
	// SingleCredential is true when every controller writes as ControllerManagerUser.
	SingleCredential bool
	proc             *process
	dir              string
	cleanup          func() error
}

type kcmOptions struct {
	single bool
	args   map[string]string
}

// ControllerManagerOption configures StartControllerManager.
type ControllerManagerOption func(*kcmOptions)

// SingleCredential runs every controller as ControllerManagerUser
// (--use-service-account-credentials=false), a common setup, instead of each as its own kube-system
// ServiceAccount. That user is bound to cluster-admin for the run (its bootstrap ClusterRole covers only
// what it needs with per-controller credentials), so that what a test sees refused is fencekit's doing,
// not RBAC's.
func SingleCredential() ControllerManagerOption { return func(o *kcmOptions) { o.single = true } }

// WithControllerManagerArg sets (or overrides) a kube-controller-manager flag, "--" left out.
func WithControllerManagerArg(name, value string) ControllerManagerOption {
	return func(o *kcmOptions) { o.args[name] = value }
}

// ControllerManager starts kube-controller-manager for the test t (StartControllerManager) and stops it
// when t ends.
func (e *Env) ControllerManager(t testing.TB, opts ...ControllerManagerOption) *ControllerManager {
	t.Helper()
	return forTest(t, func() (*ControllerManager, error) { return e.StartControllerManager(opts...) })
}

// StartControllerManager starts kube-controller-manager against e's apiserver and returns once it is
// healthy and its controllers run (the root-ca-cert-publisher has published kube-root-ca.crt in default).
// Stop it with Stop, for example at the end of TestMain; it also dies with the test binary. The binary is
// kube-controller-manager in e's assets directory, which hack/control-plane.sh builds.
func (e *Env) StartControllerManager(opts ...ControllerManagerOption) (k *ControllerManager, err error) {
	o := kcmOptions{args: map[string]string{}}
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := e.assetBinary("kube-controller-manager")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fencekit-kcm-")
	if err != nil {
		return nil, err
	}
	k = &ControllerManager{SingleCredential: o.single, dir: dir, cleanup: func() error { return nil }}
	defer func() {
		if err != nil {
			_ = k.Stop()
		}
	}()
	kubeconfig, err := e.controllerManagerKubeconfig(dir)
	if err != nil {
		return k, err
	}
	if o.single {
		if k.cleanup, err = e.bindClusterAdmin(ControllerManagerUser); err != nil {
			return k, err
		}
	}
	port, err := PickFreePort()
	if err != nil {
		return k, err
	}
	k.Port = port
	args := map[string]string{
		"kubeconfig":                       kubeconfig,
		"authentication-kubeconfig":        kubeconfig,
		"authorization-kubeconfig":         kubeconfig,
		"use-service-account-credentials":  strconv.FormatBool(!o.single),
		"service-account-private-key-file": filepath.Join(e.Environment.ControlPlane.APIServer.CertDir, "sa-signer.key"),
		"controllers":                      "*",
		"leader-elect":                     "false",
		"bind-address":                     "127.0.0.1",
		"secure-port":                      strconv.Itoa(port),
		"cert-dir":                         filepath.Join(dir, "certs"),
	}
	for name, value := range o.args {
		args[name] = value
	}
	var argv []string
	for name, value := range args {
		argv = append(argv, "--"+name+"="+value)
	}
	if k.proc, err = startProcess("kube-controller-manager", filepath.Join(dir, "kube-controller-manager.log"), bin, argv...); err != nil {
		return k, err
	}
	if err := k.waitReady(e); err != nil {
		return k, err
	}
	return k, nil
}

// Log is the path of kube-controller-manager's log (its stderr), kept until Stop.
func (k *ControllerManager) Log() string { return k.proc.log }

// Stop stops kube-controller-manager, waits until it has exited, removes its RBAC and its files.
func (k *ControllerManager) Stop() error {
	var errs []string
	if k.proc != nil {
		if err := k.proc.stop(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := k.cleanup(); err != nil {
		errs = append(errs, err.Error())
	}
	k.cleanup = func() error { return nil }
	_ = os.RemoveAll(k.dir)
	if len(errs) > 0 {
		return fmt.Errorf("stopping kube-controller-manager: %s", strings.Join(errs, "; "))
	}
	return nil
}

// waitReady waits until /healthz answers ok and kube-root-ca.crt exists in default.
func (k *ControllerManager) waitReady(e *Env) error {
	ctx, cancel := context.WithTimeout(context.Background(), ControllerManagerStartTimeout)
	defer cancel()
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // its self-signed serving certificate
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if k.proc.exited() {
			return false, fmt.Errorf("exited: %w", k.proc.err)
		}
		resp, err := insecure.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", k.Port))
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // polling on: the error is kept in last
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = "/healthz: " + resp.Status
			return false, nil
		}
		var cm corev1.ConfigMap
		if err := e.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "kube-root-ca.crt"}, &cm); err != nil {
			last = "kube-root-ca.crt in default: " + err.Error()
			return false, nil //nolint:nilerr // polling on: the error is kept in last
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("kube-controller-manager not ready after %v (last: %s): %w; its log (%s) ends:\n%s", ControllerManagerStartTimeout, last, err, k.proc.log, k.proc.tail(30))
	}
	return nil
}

// controllerManagerKubeconfig writes an admin kubeconfig that impersonates ControllerManagerUser.
func (e *Env) controllerManagerKubeconfig(dir string) (string, error) {
	admin, err := e.Environment.AddUser(envtest.User{Name: "fencekit-kcm-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding kube-controller-manager's admin user: %w", err)
	}
	raw, err := admin.KubeConfig()
	if err != nil {
		return "", err
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return "", err
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = ControllerManagerUser
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// bindClusterAdmin binds cluster-admin to user and returns the function that removes the binding.
func (e *Env) bindClusterAdmin(user string) (func() error, error) {
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fencekit-test-cluster-admin-"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := e.Client.Create(context.Background(), b); err != nil {
		return nil, fmt.Errorf("binding cluster-admin to %s: %w", user, err)
	}
	return func() error {
		if err := e.Client.Delete(context.Background(), b); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing the cluster-admin binding of %s: %w", user, err)
		}
		return nil
	}, nil
}

// assetBinary is the path of name in e's assets directory. When it is missing there and the directory is
// hack/control-plane.sh's cache, the script builds it (its progress on stderr); in any other directory
// (a KUBEBUILDER_ASSETS of the caller's) the error names the command that builds it.
func (e *Env) assetBinary(name string) (string, error) {
	dir := e.Environment.BinaryAssetsDirectory
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	script := filepath.Join(RepoRoot(), "hack", "control-plane.sh")
	out, err := exec.Command(script, "--path").Output()
	if err != nil {
		return "", fmt.Errorf("%s is not in %s, and %s --path failed: %w", name, dir, script, err)
	}
	if filepath.Clean(strings.TrimSpace(string(out))) != filepath.Clean(dir) {
		return "", fmt.Errorf("%s is not in KUBEBUILDER_ASSETS=%s: build it there with `FENCEKIT_ASSETS_DIR=%s hack/control-plane.sh` (or unset KUBEBUILDER_ASSETS to use the script's cache)", name, dir, dir)
	}
	cmd := exec.Command(script)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s with %s: %w", name, script, err)
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s did not build %s: %w", script, bin, err)
	}
	return bin, nil
}
