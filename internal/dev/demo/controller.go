package demo

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/dev/devcluster"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
)

// Controller is the scenario of `fencekit-dev demo --scenario controller`: examples/controller, a
// controller-runtime operator, runs as two replicas of one user. The leader (A) is stopped with SIGSTOP in
// the middle of a reconcile, after each of its four writes took its token; the source moves on; the
// standby (B) takes over and renders the newer state; A resumes and its writes reach the apiserver.
const Controller Scenario = "controller"

// ControllerState is what the operator's writes left: the round of the rendered ConfigMap, of the
// Deployment (annotation, replicas, status condition), and the canary Deployment (its UID tells one deleted
// and created again from the one that was there).
type ControllerState struct {
	RenderedRound, DeploymentRound, StatusReason string
	Replicas                                     int32
	Canary                                       bool
	CanaryUID                                    types.UID
}

func (s ControllerState) String() string {
	canary := "absent"
	if s.Canary {
		canary = "present"
	}
	return fmt.Sprintf("rendered round %s, Deployment round %s (%d replicas, status %s), canary %s",
		s.RenderedRound, s.DeploymentRound, s.Replicas, s.StatusReason, canary)
}

// ControllerResult is what a run of the Controller scenario showed.
type ControllerResult struct {
	Fenced           bool
	W1Epoch, W2Epoch int64
	// Late are A's round-2 writes, logged after it resumed.
	Late []Event
	// Before is what B had rendered before A resumed; After what was left once A's writes were answered.
	Before, After ControllerState
	// Fenced only (A steps back, managed.FenceEachTerm): AExited is whether A had exited once its late
	// writes were answered; W1Again the epoch A led at after B stopped; Again what A then rendered of the
	// source's round 4.
	AExited bool
	W1Again int64
	Again   ControllerState
}

// RunController plays the Controller scenario once in a fresh namespace, fenced (managed.Fence and a
// FencingPolicy) or not (controller-runtime's own leader election), calling live for each event.
// Both replicas run as the user of t.W1Kubeconfig, t.W1User.
func RunController(ctx context.Context, t Target, s Settings, fenced bool, live func(Event)) (*ControllerResult, error) {
	name := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
	r := &runner{t: t, s: s, scenario: Controller, fenced: fenced, name: name, start: time.Now(), live: live}
	defer r.stopAll()
	ns, err := r.controllerNamespace(ctx)
	if err != nil {
		return nil, err
	}
	res := &ControllerResult{Fenced: fenced}
	if err := r.setSource(ctx, ns, "1", "1", "true"); err != nil {
		return nil, err
	}
	args := []string{"--namespace=" + ns, "--lease=configsync",
		"--lease-duration=" + s.LeaseDuration.String(), "--renew-deadline=" + s.RenewDeadline.String(),
		"--retry-period=" + s.RetryPeriod.String(), "--safety-margin=" + s.SafetyMargin.String()}
	if !fenced {
		args = append(args, "--unfenced")
	}
	a, err := startProcess("A", t.ControllerBinary, t.W1Kubeconfig, nil, r.start, r.record, append(args, "--identity=A", "--pause-on-round=2")...)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, a)
	if res.W1Epoch, err = r.leads(ctx, a); err != nil {
		return nil, err
	}
	if err := r.waitState(ctx, ns, "A renders round 1", func(st ControllerState) bool { return st.RenderedRound == "1" && st.Canary }); err != nil {
		return nil, err
	}
	b, err := startProcess("B", t.ControllerBinary, t.W1Kubeconfig, nil, r.start, r.record, append(args, "--identity=B")...)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, b)
	r.sayf("the source moves to round 2 (canary off, 2 replicas)")
	if err := r.setSource(ctx, ns, "2", "2", "false"); err != nil {
		return nil, err
	}
	if _, err := a.waitFor(ctx, r.takeover(), "its pause in round 2", isMsg("pausing")); err != nil {
		return nil, err
	}
	if err := a.signal(syscall.SIGSTOP); err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, 10*time.Second, a.stopped); err != nil {
		return nil, fmt.Errorf("worker A did not stop: %w", err)
	}
	r.sayf("A stopped (SIGSTOP) in the middle of round 2; the source moves to round 3 (canary on, 3 replicas)")
	if err := r.setSource(ctx, ns, "3", "3", "true"); err != nil {
		return nil, err
	}
	if res.W2Epoch, err = r.leads(ctx, b); err != nil {
		return nil, err
	}
	if err := r.waitState(ctx, ns, "B renders round 3", func(st ControllerState) bool {
		res.Before = st
		return st.RenderedRound == "3" && st.DeploymentRound == "3" && st.StatusReason == "Round3" && st.Canary
	}); err != nil {
		return nil, err
	}
	r.sayf("B rendered round 3; A is resumed (SIGCONT)")
	if err := a.signal(syscall.SIGCONT); err != nil {
		return nil, err
	}
	for i := range 4 {
		seen := 0
		e, err := a.waitFor(ctx, 30*time.Second, "its round-2 writes", func(e Event) bool {
			if e.Msg == "write" && e.Round == "2" {
				seen++
				return seen > i
			}
			return false
		})
		if err != nil {
			return nil, err
		}
		res.Late = append(res.Late, e)
	}
	if res.After, err = r.readState(ctx, ns); err != nil || !fenced {
		return res, err
	}
	// A stepped back instead of exiting: once B stops, it leads again at a new epoch and reconciles.
	select {
	case <-a.exited:
		res.AExited = true
		return res, nil
	default:
	}
	r.sayf("A stands by, still running; B stops, and the source moves to round 4 (canary on, 4 replicas)")
	b.terminate()
	lead, err := a.waitFor(ctx, r.takeover(), "its next term", func(e Event) bool { return e.Msg == "leading" && e.Epoch > res.W2Epoch })
	if err != nil {
		return nil, err
	}
	res.W1Again = lead.Epoch
	if err := r.setSource(ctx, ns, "4", "4", "true"); err != nil {
		return nil, err
	}
	if err := r.waitState(ctx, ns, "A renders round 4", func(st ControllerState) bool {
		res.Again = st
		return st.RenderedRound == "4" && st.DeploymentRound == "4" && st.StatusReason == "Round4" && st.Canary
	}); err != nil {
		return nil, err
	}
	r.sayf("A leads again at epoch %d and rendered round 4", res.W1Again)
	return res, nil
}

// ControllerCheck reports whether the two runs showed what they should: fenced, every one of A's late
// writes refused as stale, B's state untouched, and A, still running, leading again once B stopped and
// rendering the next round; unfenced, all four admitted and B's canary deleted.
func ControllerCheck(fenced, unfenced *ControllerResult) error {
	var problems []string
	for _, r := range []*ControllerResult{fenced, unfenced} {
		ops := map[string]bool{}
		for _, e := range r.Late {
			ops[e.Op] = true
		}
		if len(ops) != 4 {
			problems = append(problems, fmt.Sprintf("%s: A's late writes were %v, want update, patch, status and delete", runLabel(r), ops))
		}
	}
	for _, e := range fenced.Late {
		if e.Accepted == nil || *e.Accepted || e.Reason != string(protocol.ReasonStale) {
			problems = append(problems, fmt.Sprintf("fenced: A's late %s was not refused as stale (%s %s)", e.Op, e.Reason, e.Error))
		}
	}
	if fenced.After != fenced.Before {
		problems = append(problems, fmt.Sprintf("fenced: after A resumed, %v; B had left %v", fenced.After, fenced.Before))
	}
	if fenced.AExited {
		problems = append(problems, "fenced: A exited after it lost the Lease, instead of standing by")
	} else if fenced.W1Again <= fenced.W2Epoch || fenced.Again.RenderedRound != "4" {
		problems = append(problems, fmt.Sprintf("fenced: after B stopped, A led at epoch %d (B's was %d) and left %v, want a new epoch and round 4", fenced.W1Again, fenced.W2Epoch, fenced.Again))
	}
	for _, e := range unfenced.Late {
		if e.Accepted == nil || !*e.Accepted {
			problems = append(problems, fmt.Sprintf("unfenced: A's late %s was refused (%s): the control run should show the overwrite", e.Op, e.Error))
		}
	}
	if unfenced.After.Canary && unfenced.After.CanaryUID == unfenced.Before.CanaryUID {
		problems = append(problems, "unfenced: B's canary survived A's stale delete")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s", errNotShown, strings.Join(problems, "\n  "))
	}
	return nil
}

func runLabel(r *ControllerResult) string {
	if r.Fenced {
		return "fenced"
	}
	return "unfenced"
}

// controllerNamespace creates the run's namespace, lets t.W1User run the operator there (the
// fencekit-elector role, and writing ConfigMaps, Deployments and their status, Leases and Events) and, for
// the fenced run, declares the FencingPolicy and waits until the webhook enforces it.
func (r *runner) controllerNamespace(ctx context.Context) (string, error) {
	c := r.t.Admin
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "fencekit-demo-controller-"}}
	if err := c.Create(ctx, nsObj); err != nil {
		return "", err
	}
	ns := nsObj.Name
	if err := devcluster.BindElector(ctx, c, ns, r.t.W1User); err != nil {
		return "", err
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configsync", Namespace: ns},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "deployments/status"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"fencing.fencekit.io"}, Resources: []string{"fencingpolicies"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "configsync", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configsync"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: r.t.W1User}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			return "", err
		}
	}
	if !r.fenced {
		return ns, nil
	}
	policy := &fencingv1alpha1.FencingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configsync"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "configsync", Resources: []fencingv1alpha1.FencedObjects{
			{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"example.fencekit.io/rendered": "true"}}},
			{Group: "apps", Resource: "deployments"},
		}}}
	if err := c.Create(ctx, policy); err != nil {
		return "", fmt.Errorf("declaring the FencingPolicy: %w", err)
	}
	var last error
	err := waitUntil(ctx, 30*time.Second, func() bool {
		probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe",
			Labels: map[string]string{"example.fencekit.io/rendered": "true"}}}
		last = c.Create(ctx, probe, client.DryRunAll)
		return fencing.IsTokenMissing(last)
	})
	if err != nil {
		return "", fmt.Errorf("the FencingPolicy is not enforced (last probe: %w): %w", last, err)
	}
	r.sayf("FencingPolicy configsync declared: only the holder of Lease configsync may write the rendered ConfigMaps and the Deployments")
	return ns, nil
}

func (r *runner) setSource(ctx context.Context, ns, round, replicas, canary string) error {
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: map[string]string{"example.fencekit.io/source": "true"}}}
	data := map[string]string{"round": round, "replicas": replicas, "canary": canary, "message": "round " + round}
	err := r.t.Admin.Get(ctx, client.ObjectKeyFromObject(src), src)
	switch {
	case apierrors.IsNotFound(err):
		src.Data = data
		err = r.t.Admin.Create(ctx, src)
	case err == nil:
		src.Data = data
		err = r.t.Admin.Update(ctx, src)
	}
	if err != nil {
		return fmt.Errorf("setting the source to round %s: %w", round, err)
	}
	return nil
}

func (r *runner) readState(ctx context.Context, ns string) (ControllerState, error) {
	var s ControllerState
	var cm corev1.ConfigMap
	switch err := r.t.Admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-rendered"}, &cm); {
	case err == nil:
		s.RenderedRound = cm.Data["round"]
	case !apierrors.IsNotFound(err):
		return s, err
	}
	var d appsv1.Deployment
	switch err := r.t.Admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web"}, &d); {
	case err == nil:
		s.DeploymentRound = d.Annotations["example.fencekit.io/round"]
		if d.Spec.Replicas != nil {
			s.Replicas = *d.Spec.Replicas
		}
		for _, c := range d.Status.Conditions {
			if c.Type == "Rendered" {
				s.StatusReason = c.Reason
			}
		}
	case !apierrors.IsNotFound(err):
		return s, err
	}
	var canary appsv1.Deployment
	switch err := r.t.Admin.Get(ctx, types.NamespacedName{Namespace: ns, Name: "web-canary"}, &canary); {
	case err == nil:
		s.Canary, s.CanaryUID = true, canary.UID
	case !apierrors.IsNotFound(err):
		return s, err
	}
	return s, nil
}

func (r *runner) waitState(ctx context.Context, ns, what string, cond func(ControllerState) bool) error {
	var last ControllerState
	var readErr error
	err := waitUntil(ctx, r.s.LeaseDuration*3+30*time.Second, func() bool {
		last, readErr = r.readState(ctx, ns)
		return readErr == nil && cond(last)
	})
	if err != nil {
		return fmt.Errorf("%s: %w (last seen: %v, %w)", what, err, last, readErr)
	}
	return nil
}
