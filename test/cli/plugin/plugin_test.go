package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/cli/plugin"
	"github.com/fencekit/fencekit/pkg/elector"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/pkg/protocol"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env, testenv.WithWebhooks(), testenv.WithLeasePolicy()) }

// run runs `kubectl fencekit args...` against the test apiserver through the kubeconfig flags, as kubectl
// runs the plugin, and returns its standard output.
func run(t *testing.T, args ...string) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Environment.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	args = append([]string{"--kubeconfig", kubeconfig, "--cache-dir", t.TempDir()}, args...)
	if err := plugin.Run(t.Context(), args, streams); err != nil {
		t.Fatalf("kubectl fencekit %s: %v\n%s", strings.Join(args[4:], " "), err, errOut)
	}
	return out.String()
}

func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := run(t, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("decoding the JSON of kubectl fencekit %v: %v\n%s", args, err, out)
	}
}

// row finds the line of a table whose whitespace-separated fields start with prefix.
func row(t *testing.T, out string, prefix ...string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= len(prefix) && slicesEqual(f[:len(prefix)], prefix) {
			return f
		}
	}
	t.Fatalf("no row starting with %q in:\n%s", prefix, out)
	return nil
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// scenario: worker-a held lease orders-writer at epoch 5 and wrote FencedResources orders and audit;
// worker-b took over at 6 and wrote audit; worker-a's late write to orders was refused by the webhook.
func scenario(t *testing.T) (ns string, a, b testenv.Worker) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns = env.Namespace(t)
	a, b = env.NewWorker(t, ns, "worker-a"), env.NewWorker(t, ns, "worker-b")
	orders := env.Declare(t, ns, "orders", "orders-writer")
	audit := env.Declare(t, ns, "audit", "orders-writer")
	ta := a.Acquire(t, ns, "orders-writer", 5)
	for _, key := range []types.NamespacedName{orders, audit} {
		if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, key, map[string]any{"v": "a5"}); err != nil {
			t.Fatal(err)
		}
	}
	tb := b.Acquire(t, ns, "orders-writer", 6)
	if _, err := fencing.NewWriter(b.Client).Set(ctx, tb, audit, map[string]any{"v": "b6"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fencing.NewWriter(a.Client).Set(ctx, ta, orders, map[string]any{"v": "a5-late"}); !fencing.IsStale(err) {
		t.Fatalf("worker-a's late write: %v, want a stale refusal", err)
	}
	return ns, a, b
}

// TestStatus: `status` lists the held Lease with its holder, epoch, expiry and safe-work deadline, the
// resources bound to it (one behind, one current) and the refusal, in JSON and as tables.
func TestStatus(t *testing.T) {
	ns, _, _ := scenario(t)
	var lease coordinationv1.Lease
	if err := env.Client.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: "orders-writer"}, &lease); err != nil {
		t.Fatal(err)
	}
	renew := lease.Spec.RenewTime.Time
	// An Event from another component on the same resource is no fencekit refusal.
	other := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other"}, EventTime: metav1.NewMicroTime(time.Now()),
		ReportingController: "someone-else", ReportingInstance: "x", Action: "Write", Reason: "FencingStaleEpoch", Type: "Warning", Note: "not fencekit's",
		Regarding: corev1.ObjectReference{APIVersion: "fencing.fencekit.io/v1alpha1", Kind: "FencedResource", Namespace: ns, Name: "orders"}}
	if err := env.Client.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}

	var report plugin.StatusReport
	testenv.Eventually(t, "the refusal's Event in the status", func() (bool, string) {
		report = plugin.StatusReport{}
		runJSON(t, &report, "status", "-n", ns)
		return len(report.Refusals) == 1, fmt.Sprintf("refusals %+v", report.Refusals)
	})
	if len(report.Leases) != 1 {
		t.Fatalf("leases %+v, want orders-writer only", report.Leases)
	}
	l := report.Leases[0]
	if l.Namespace != ns || l.Name != "orders-writer" || l.Holder != "worker-b" || l.Acquirer != "worker-b-user" || l.Epoch != 6 ||
		l.BoundResources != 2 || l.BehindResources != 1 {
		t.Errorf("lease %+v, want orders-writer held by worker-b (worker-b-user) at epoch 6, 2 bound resources, 1 behind", l)
	}
	if want := renew.Add(15 * time.Second); l.ExpiresAt == nil || !l.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt %v, want renewTime + 15s = %v", l.ExpiresAt, want)
	}
	// The default safe window for 15 s: 15s*(1-0.01) - 2s = 12.85 s.
	if want := renew.Add(12850 * time.Millisecond); l.SafeWorkDeadline == nil || !l.SafeWorkDeadline.Equal(want) {
		t.Errorf("safeWorkDeadline %v, want renewTime + 12.85s = %v", l.SafeWorkDeadline, want)
	}
	want := map[string]plugin.ResourceStatus{
		"orders": {Namespace: ns, Name: "orders", Lease: "orders-writer", Epoch: 5, LeaseEpoch: 6, State: plugin.StateBehind, Behind: true},
		"audit":  {Namespace: ns, Name: "audit", Lease: "orders-writer", Epoch: 6, LeaseEpoch: 6, State: plugin.StateCurrent},
	}
	if len(report.FencedResources) != len(want) {
		t.Errorf("fencedResources %+v, want orders and audit", report.FencedResources)
	}
	for _, got := range report.FencedResources {
		w := want[got.Name]
		got.Ready, got.ReadyReason = "", "" // the operator's, checked in controllers
		if got != w {
			t.Errorf("fencedResource %s: %+v, want %+v", got.Name, got, w)
		}
	}
	r := report.Refusals[0]
	wantNote := "FencedResource " + ns + "/orders: stale epoch 5: lease orders-writer is at epoch 6, held by worker-b"
	// Count is the webhook's refusals: the apiserver runs admission again when the write's compare-and-swap
	// loses to another write (the operator's status), so one refused request may count twice.
	if r.Namespace != ns || r.Kind != "FencedResource" || r.Name != "orders" || r.Reason != string(protocol.ReasonStale) || r.Note != wantNote || r.Count < 1 {
		t.Errorf("refusal %+v, want FencedResource orders %s %q", r, protocol.ReasonStale, wantNote)
	}

	out := run(t, "status", "-n", ns)
	t.Logf("kubectl fencekit status:\n%s", out)
	lr := row(t, out, ns, "orders-writer", "worker-b", "6")
	// EXPIRES and SAFE-WORK DEADLINE are "in 14.9s" and "in 12.7s" (two fields each), then 2 bound, 1 behind.
	if n := len(lr); n != 11 || lr[4] != "in" || lr[6] != "in" || lr[8] != "2" || lr[9] != "1" || lr[10] != "-" {
		t.Errorf("lease row %q: want expiry, deadline, 2 resources, 1 behind, no policy", lr)
	}
	row(t, out, ns, "orders", "orders-writer", "5", "6", "Behind")
	row(t, out, ns, "audit", "orders-writer", "6", "6", "Current")
	if !regexp.MustCompile(`FencedResource/orders  FencingStaleEpoch  [0-9]+ +` + regexp.QuoteMeta(wantNote)).MatchString(out) {
		t.Errorf("no refusal row for FencedResource/orders in:\n%s", out)
	}
}

// TestExplainFencedResource: `explain fr/orders` judges the holder's write admitted, a stale replica's
// refused by the webhook (stale), a write without a token refused (token missing), and a write below the
// stored epoch refused by the CRD rule. Each verdict is checked against the apiserver itself, with the
// same write sent as a dry run.
func TestExplainFencedResource(t *testing.T) {
	ns, a, b := scenario(t)
	var e plugin.Explanation
	runJSON(t, &e, "explain", "fr/orders", "-n", ns, "--epoch", "4", "--requester", "worker-a-user")
	if e.Kind != "FencedResource" || e.Name != "orders" || !e.Fenced || e.LeaseName != "orders-writer" || e.Epoch != 5 || e.State != plugin.StateBehind ||
		e.Lease == nil || e.Lease.Epoch != 6 || e.Lease.Holder != "worker-b" {
		t.Fatalf("explanation %+v", e)
	}
	type want struct {
		epoch                     int64
		user                      string
		admitted                  bool
		mechanism, reason, prefix string
		client                    client.Client
	}
	wants := map[string]want{
		"holder":        {6, "worker-b-user", true, "", "", "", b.Client},
		"stale-replica": {5, "worker-b-user", false, fencing.MechanismWebhook, string(protocol.ReasonStale), "FencedResource " + ns + "/orders: stale epoch 5", b.Client},
		"no-token":      {0, "someone", false, fencing.MechanismWebhook, string(protocol.ReasonTokenMissing), "FencedResource " + ns + "/orders: this write changes spec.data", env.Client},
		"requested":     {4, "worker-a-user", false, fencing.MechanismCRDRule, string(protocol.ReasonStale), "stale epoch 4", a.Client},
	}
	if len(e.Writes) != len(wants) {
		t.Errorf("%d writes judged, want %d: %+v", len(e.Writes), len(wants), e.Writes)
	}
	for _, v := range e.Writes {
		w, ok := wants[v.Writer]
		if !ok {
			t.Errorf("unexpected write %+v", v)
			continue
		}
		if v.Epoch != w.epoch || v.User != w.user || v.Admitted != w.admitted || v.Mechanism != w.mechanism || v.Reason != w.reason ||
			!strings.HasPrefix(v.Message, w.prefix) {
			t.Errorf("write %s: %+v, want epoch %d user %s admitted %v by %q reason %q message %q...", v.Writer, v, w.epoch, w.user, w.admitted, w.mechanism, w.reason, w.prefix)
		}
		// The apiserver's own verdict on the same write (a dry run: no side effects).
		fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"}}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"worker-b"}},"spec":{"epoch":%d,"data":{"kubectl-fencekit-explain":true}}}`,
			fencingv1alpha1.WriterAnnotation, v.Epoch)
		opts := []client.PatchOption{client.DryRunAll, client.FieldOwner(v.FieldManager)}
		if v.Epoch == 0 {
			patch = `{"spec":{"data":{"kubectl-fencekit-explain":true}}}`
		}
		err := w.client.Patch(t.Context(), fr, client.RawPatch(types.MergePatchType, []byte(patch)), opts...)
		if admitted := err == nil; admitted != v.Admitted || string(fencing.ReasonOf(err)) != v.Reason {
			t.Errorf("write %s: kubectl fencekit says admitted=%v reason %q; the apiserver: %v", v.Writer, v.Admitted, v.Reason, err)
		}
	}

	out := run(t, "explain", "fr/orders", "-n", ns)
	t.Logf("kubectl fencekit explain fr/orders:\n%s", out)
	row(t, out, "holder", "6", "worker-b-user", "admitted")
	row(t, out, "stale-replica", "5", "worker-b-user", "refused", "webhook", "FencingStaleEpoch")
	row(t, out, "no-token", "-", "someone", "refused", "webhook", "FencingTokenMissing")
}

// TestExplainDeclaredObject: `explain configmap/NAME` finds the FencingPolicy that declares the ConfigMap
// and judges writes with the object webhook's rules; a ConfigMap no policy selects is not fenced.
func TestExplainDeclaredObject(t *testing.T) {
	ns, _, b := scenario(t)
	ctx := t.Context()
	p := &fencingv1alpha1.FencingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
		Spec: fencingv1alpha1.FencingPolicySpec{LeaseName: "orders-writer", Resources: []fencingv1alpha1.FencedObjects{
			{Resource: "configmaps", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "fenced"}}}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	// worker-b may write ConfigMaps (RBAC), so that what decides is fencekit.
	for _, o := range []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "configmaps"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: b.User}}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	settings := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "settings", Labels: map[string]string{"app": "fenced"}}, Data: map[string]string{"k": "v"}}
	testenv.Eventually(t, "the holder creates a declared ConfigMap through the objects webhook", func() (bool, string) {
		err := fencing.NewClient(b.Client, func() elector.Token {
			return elector.Token{Epoch: 6, Lease: types.NamespacedName{Namespace: ns, Name: "orders-writer"}, Holder: "worker-b"}
		}).Create(ctx, settings.DeepCopy())
		return err == nil, fmt.Sprint(err)
	})
	if err := env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}}); err != nil {
		t.Fatal(err)
	}

	var e plugin.Explanation
	runJSON(t, &e, "explain", "cm/settings", "-n", ns, "--epoch", "5", "--requester", "worker-a-user")
	if e.Kind != "ConfigMap" || !e.Fenced || e.Policy != ns+"/app" || e.LeaseName != "orders-writer" || e.Epoch != 6 || e.State != plugin.StateCurrent {
		t.Fatalf("explanation %+v", e)
	}
	got := map[string]string{}
	for _, v := range e.Writes {
		got[v.Writer] = fmt.Sprintf("%v %s", v.Admitted, v.Reason)
		if strings.Contains(v.Message, "kubectl-fencekit/explain") || (v.Writer == "no-token" && !strings.Contains(v.Message, "this write changes its content")) {
			t.Errorf("the %s write's refusal names explain's own probe, not the change it stands for: %q", v.Writer, v.Message)
		}
	}
	wantWrites := map[string]string{"holder": "true ", "no-token": "false " + string(protocol.ReasonTokenMissing), "requested": "false " + string(protocol.ReasonStale)}
	if fmt.Sprint(got) != fmt.Sprint(wantWrites) {
		t.Errorf("writes %v, want %v", got, wantWrites)
	}

	var plain plugin.Explanation
	runJSON(t, &plain, "explain", "configmap/plain", "-n", ns)
	if plain.Fenced || len(plain.Writes) != 0 {
		t.Errorf("ConfigMap plain, which no policy selects: %+v, want not fenced", plain)
	}
	if out := run(t, "explain", "configmap/plain", "-n", ns); !strings.Contains(out, "not declared by any FencingPolicy") {
		t.Errorf("explain configmap/plain:\n%s", out)
	}
}
