package admission_test

// Round 10 of the independent attacker (against 52cd484, 30 minutes). Each test asserts the invariant it
// tries to break: it fails while the attack works. Every attack that worked is closed (decision 0043).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencingv1alpha1 "github.com/fencekit/fencekit/api/v1alpha1"
	"github.com/fencekit/fencekit/internal/operator/admission"
	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// round10Managers lists the managedFields entries of FencedResource key as manager/operation/subresource.
func round10Managers(t *testing.T, key types.NamespacedName) []string {
	t.Helper()
	var out []string
	for _, e := range get(t, key).ManagedFields {
		out = append(out, e.Manager+"/"+string(e.Operation)+"/"+e.Subresource)
	}
	return out
}

// round10WaitStatus waits up to d for FencedResource key's status to satisfy ok; it returns whether it did
// and the last status seen.
func round10WaitStatus(t *testing.T, key types.NamespacedName, d time.Duration, ok func(s fencingv1alpha1.FencedResourceStatus) bool) (bool, fencingv1alpha1.FencedResourceStatus) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s := get(t, key).Status
		if ok(s) {
			return true, s
		}
		if time.Now().After(deadline) {
			return false, s
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// round10Conds is the types and statuses of conditions, for logs.
func round10Conds(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Type+"="+string(c.Status))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func round10LeaseFound(s fencingv1alpha1.FencedResourceStatus) bool {
	c := meta.FindStatusCondition(s.Conditions, fencingv1alpha1.ConditionLeaseFound)
	return c != nil && c.Status == metav1.ConditionTrue
}

func round10HasReady(s fencingv1alpha1.FencedResourceStatus) bool {
	return meta.FindStatusCondition(s.Conditions, fencingv1alpha1.ConditionReady) != nil
}

// TestRound10EditorsConditionsHideTheStatus: attack on the promise of decision 0042 ("whoever may label a
// FencedResource cannot hide its status") and "nothing a non-holder writes locks out" the operator, by an
// editor who may write fencedresources/status (round 9's editor, the cases table's). The operator's
// ComputeStatus keeps every condition it finds (Conditions: append(fr.Status.Conditions...)) and sets its
// three; the CRD allows at most 8 conditions. The editor declares a FencedResource, then writes its status
// with 8 conditions of foreign types (a free write: a FencedResource's status). The operator's status then
// needs 11 and the CRD refuses every one of its writes: after the holder acquires the Lease, the status
// must show LeaseFound=True (and a Ready condition).
// Observed (52cd484): WORKED. The editor's status write with 8 foreign conditions was admitted; 15 s after
// the acquisition the declaration showed only [example.com/C0=True ... example.com/C7=True] (leaseEpoch 0);
// the operator user's status patch adding Ready was refused by the apiserver: "status.conditions: Too
// many: 9: must have at most 8 items". (A byte variant, not run: the editor swaps the operator's three
// conditions for bytes of its own of the same size, which never grows the part, until the operator's
// re-added conditions pass its 80 KiB allowance.)
// Closed (decision 0043): the operator writes its own three conditions alone; others' are dropped.
func TestRound10EditorsConditionsHideTheStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	editor := round9Editor(t, ns, "editor")
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decl"},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: appLease}}
	if err := retryRBAC(t, "the editor's declaration", func() error { return editor.Create(ctx, fr) }); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(fr)
	if ok, s := round10WaitStatus(t, key, 20*time.Second, round10HasReady); !ok {
		t.Fatalf("the operator wrote no status: %s", round10Conds(s.Conditions))
	}
	got := get(t, key)
	got.Status.Conditions = nil
	for i := range 8 {
		got.Status.Conditions = append(got.Status.Conditions, metav1.Condition{Type: fmt.Sprintf("example.com/C%d", i),
			Status: metav1.ConditionTrue, Reason: "Padding", Message: "x", LastTransitionTime: metav1.Now()})
	}
	err := editor.Status().Update(ctx, got)
	t.Logf("the editor's status write with 8 foreign conditions: %v", round9Short(err))
	if err != nil {
		t.Skipf("the editor's status write was refused: %v", err)
	}
	holder := newWorker(t, ns, "app-operator")
	holder.Acquire(t, ns, appLease, 1)
	ok, s := round10WaitStatus(t, key, 15*time.Second, func(s fencingv1alpha1.FencedResourceStatus) bool {
		return round10LeaseFound(s) && round10HasReady(s)
	})
	t.Logf("status after the acquisition: leaseEpoch %d, conditions %s", s.LeaseEpoch, round10Conds(s.Conditions))
	if !ok {
		// The operator's own write, as it would make it, for the message.
		cur := get(t, key)
		patch := client.MergeFrom(cur.DeepCopy())
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: fencingv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Probe", Message: "probe"})
		perr := env.Client.Status().Patch(ctx, cur, patch)
		t.Logf("the operator user's status patch adding Ready: %v", round9Short(perr))
		t.Errorf("the operator's status is hidden: 15 s after the acquisition the declaration shows %s, no LeaseFound=True/Ready", round10Conds(s.Conditions))
	}
}

// TestRound10BucketTakesTheOperatorsStatus: attack on "nothing a non-holder writes locks out" the operator
// (its status, decision 0042), through ancient-changes, by an editor who may only label FencedResources.
// The apiserver merges the oldest Update entries into ancient-changes once there are more than ten, the
// operator's status entry (subresource status) among them; the rule treats the bucket as a holder's entry,
// which a write without the token may not take anything from, and only the cluster's controllers are
// exempt. The editor declares a FencedResource (field manager "creator"); the operator writes its status;
// a second later the editor sets eleven labels, one write and field manager each ("tool-0".."tool-10"):
// the operator's entry is merged into the bucket. The holder then acquires the Lease: the operator's
// status write (LeaseFound turns True) takes the conditions from the bucket, and must be admitted.
// Observed (52cd484): WORKED. After the operator's status: managers [admission.test/Update/status
// creator/Update/]; after the eleven label writes (all admitted): [ancient-changes tool-2 ... tool-10].
// 15 s after the acquisition the status still showed [LeaseFound=False Fenced=Unknown Ready=False], and
// the operator user's status patch was refused: "this write changes metadata.managedFields: it takes from
// a fenced writer's entry ownership of status.conditions in the entry of manager "ancient-changes"
// (Update) but presents no fencing token (no field manager)".
// Closed (decision 0043): the operator's status writes may take their fields back from ancient-changes.
func TestRound10BucketTakesTheOperatorsStatus(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	editor := round9Editor(t, ns, "editor")
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decl"},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: appLease}}
	if err := retryRBAC(t, "the editor's declaration", func() error { return editor.Create(ctx, fr, client.FieldOwner("creator")) }); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(fr)
	if ok, s := round10WaitStatus(t, key, 20*time.Second, round10HasReady); !ok {
		t.Fatalf("the operator wrote no status: %s", round10Conds(s.Conditions))
	}
	t.Logf("after the operator's status: managers %v", round10Managers(t, key))
	time.Sleep(1100 * time.Millisecond)
	for k := range 11 {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"l-%d":"v"}}}`, k)
		if err := editor.Patch(ctx, &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decl"}},
			client.RawPatch(types.MergePatchType, []byte(patch)), client.FieldOwner(fmt.Sprintf("tool-%d", k))); err != nil {
			t.Fatalf("the editor's label %d: %v; managers %v", k, round9Short(err), round10Managers(t, key))
		}
	}
	ms := round10Managers(t, key)
	t.Logf("after eleven label writes: managers %v", ms)
	holder := newWorker(t, ns, "app-operator")
	holder.Acquire(t, ns, appLease, 1)
	ok, s := round10WaitStatus(t, key, 15*time.Second, round10LeaseFound)
	t.Logf("status after the acquisition: leaseEpoch %d, conditions %s; managers %v", s.LeaseEpoch, round10Conds(s.Conditions), round10Managers(t, key))
	if !ok {
		cur := get(t, key)
		patch := client.MergeFrom(cur.DeepCopy())
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: fencingv1alpha1.ConditionLeaseFound, Status: metav1.ConditionTrue, Reason: "Probe", Message: "probe"})
		perr := env.Client.Status().Patch(context.Background(), cur, patch)
		t.Logf("the operator user's status patch of LeaseFound: %v", round9Short(perr))
		t.Errorf("the operator is locked out of the declaration's status: 15 s after the acquisition it shows %s", round10Conds(s.Conditions))
	}
}

// round10Covered sets up namespace ns with a policy over ConfigMaps, a holder at epoch 1 and an editor
// (RBAC on ConfigMaps); the holder applies ConfigMap cm (server-side apply with its token) with data
// keep and drop, and the editor adds ten finalizers, each with a field manager of its own (tool-0..tool-9),
// then one more (tool-10), so that the apiserver has merged the oldest into ancient-changes.
func round10Covered(t *testing.T, ns string) (holder worker, fc client.Client, editor client.Client) {
	t.Helper()
	ctx := t.Context()
	holder = newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	grantObjects(t, ns, holder.User, "editor")
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fc = fencing.NewClient(holder.Client, tokenOf(tok))
	if err := retryRBAC(t, "the holder's ConfigMap", func() error {
		return fc.Apply(ctx, corev1ac.ConfigMap("cm", ns).WithData(map[string]string{"keep": "1", "drop": "1"}))
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	editor = env.ClientAs(t, "editor")
	round10Finalizers(t, editor, ns, "cm")
	return holder, fc, editor
}

// round10Finalizers has c add finalizers example.com/f-0..f-10 to ConfigMap ns/name, one write and field
// manager (tool-k) each, so that the apiserver merges the oldest entries into ancient-changes.
func round10Finalizers(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	fs := []string{}
	for k := range 11 {
		fs = append(fs, fmt.Sprintf("example.com/f-%d", k))
		patch := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": fs}})
		if err := retryRBAC(t, "the editor's finalizer", func() error {
			return c.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fmt.Sprintf("tool-%d", k)))
		}); err != nil {
			t.Fatalf("the editor's finalizer %d on %s: %v", k, name, round9Short(err))
		}
	}
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
}

// round10MF lists cm's managedFields entries as manager/operation/subresource fieldsV1.
func round10MF(t *testing.T, ns string) string {
	t.Helper()
	var out []string
	for _, e := range testenv.Read[corev1.ConfigMap](t, env.Client, ns, "cm").ManagedFields {
		f := ""
		if e.FieldsV1 != nil {
			f = e.FieldsV1.GetRawString()
		}
		out = append(out, fmt.Sprintf("%s/%s/%s %s", e.Manager, e.Operation, e.Subresource, f))
	}
	return strings.Join(out, "\n")
}

// round10Forge updates cm as c (no token) with managedFields: the stored ones, limited to ten Update
// entries (the bucket, the forged entry and the eight newest others), the bucket also owning finalizer
// example.com/f-10 (so that undoMerges, at the cap, builds its synthetic entry of the writer), and a forged
// Update entry of the field manager named manager (apiVersion v1) owning fields.
func round10Forge(t *testing.T, c client.Client, ns, manager, fields string) error {
	t.Helper()
	return round10ForgeOn(t, c, ns, "cm", manager, fields)
}

// round10ForgeOn is round10Forge on ConfigMap ns/name.
func round10ForgeOn(t *testing.T, c client.Client, ns, name, manager, fields string) error {
	t.Helper()
	cm := testenv.Read[corev1.ConfigMap](t, env.Client, ns, name)
	var mf []metav1.ManagedFieldsEntry
	others := 0
	for _, e := range cm.ManagedFields {
		switch {
		case e.Operation != metav1.ManagedFieldsOperationUpdate:
			mf = append(mf, e)
		case e.Manager == admission.AncientChanges:
			var set map[string]any
			if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &set); err != nil {
				t.Fatal(err)
			}
			md, _ := set["f:metadata"].(map[string]any)
			if md == nil {
				md = map[string]any{}
				set["f:metadata"] = md
			}
			fin, _ := md["f:finalizers"].(map[string]any)
			if fin == nil {
				fin = map[string]any{".": map[string]any{}}
				md["f:finalizers"] = fin
			}
			fin[`v:"example.com/f-10"`] = map[string]any{}
			e.FieldsV1 = metav1.NewFieldsV1(string(mustJSON(t, set)))
			mf = append(mf, e)
		}
	}
	// The newest eight other Update entries (tool-3..tool-10).
	var rest []metav1.ManagedFieldsEntry
	for _, e := range cm.ManagedFields {
		if e.Operation == metav1.ManagedFieldsOperationUpdate && e.Manager != admission.AncientChanges {
			rest = append(rest, e)
		}
	}
	// The apiserver lists them in no useful order: keep tool-3..tool-10 by number.
	slices.SortFunc(rest, func(a, b metav1.ManagedFieldsEntry) int {
		return cmp.Compare(len(a.Manager), len(b.Manager))*2 + cmp.Compare(a.Manager, b.Manager)
	})
	slices.SortStableFunc(rest, func(a, b metav1.ManagedFieldsEntry) int {
		if c := cmp.Compare(len(a.Manager), len(b.Manager)); c != 0 {
			return c
		}
		return cmp.Compare(a.Manager, b.Manager)
	})
	if len(rest) > 8 {
		rest = rest[len(rest)-8:]
	}
	others = len(rest)
	mf = append(mf, rest...)
	now := metav1.Now()
	mf = append(mf, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		Time: &now, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)})
	if name == "cm" {
		t.Logf("forging: %d other Update entries kept of %d", others, len(cm.ManagedFields))
	}
	cm.ManagedFields = mf
	return c.Update(t.Context(), cm, client.FieldOwner("tool-forge"))
}

// TestRound10ForgedEntryNamedAsTheSyntheticOne: attack on I1 (ownership: the managedFields that decide
// what the holder's apply prunes) through undoMerges' synthetic entry. At the cap (ten Update entries
// before and after), what ancient-changes gains beyond what it held and what merged entries held is
// given to an entry of id mergedWriter ("(this write's own entry, merged by the apiserver into
// ancient-changes)", Update, apiVersion of the bucket), written into the map of entries after the write
// (out[w.id()] = w). A write that itself sends an entry of that manager replaces it there: the real
// entry's fields are never judged. The holder applies cm (data keep, drop); the editor's eleven finalizer
// writes bring it to ten Update entries; the editor then sends managedFields (no token): the bucket also
// owning finalizer f-10, and a forged Update entry of that manager owning data.drop. The write must be
// refused; and the holder's next apply without drop must remove it.
// Observed (52cd484): WORKED (3 runs; a first run whose list kept tool-2 and dropped tool-10 made f-10 a
// merged field, no synthetic entry, and was refused). The forged write was admitted; the ConfigMap then
// carried the entry `(this write's own entry, merged by the apiserver into ancient-changes)/Update
// {"f:data":{"f:drop":{}}}`; the holder's server-side apply (forced) of data {keep: 2} left data
// map[drop:1 keep:2], the holder's Apply entry owning only data.keep. The same forgery under manager
// "tool-x" (TestRound10ForgedEntryControl) is refused: "it gives ownership of data.drop in the entry of
// manager "tool-x" (Update)", and the holder's apply then removes drop.
// Closed (decision 0043): the entry undoMerges builds has an operation no request can send.
func TestRound10ForgedEntryNamedAsTheSyntheticOne(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	_, fc, editor := round10Covered(t, ns)
	t.Logf("before the forgery:\n%s", round10MF(t, ns))
	const synthetic = "(this write's own entry, merged by the apiserver into " + admission.AncientChanges + ")"
	err := round10Forge(t, editor, ns, synthetic, `{"f:data":{"f:drop":{}}}`)
	t.Logf("the editor's forged write (manager %q owning data.drop): %v", synthetic, round9Short(err))
	t.Logf("after:\n%s", round10MF(t, ns))
	if err == nil {
		t.Errorf("a write without the token gave a non-holder entry ownership of data.drop")
	}
	if err := fc.Apply(ctx, corev1ac.ConfigMap("cm", ns).WithData(map[string]string{"keep": "2"})); err != nil {
		t.Fatalf("the holder's apply without drop: %v", err)
	}
	got := testenv.Read[corev1.ConfigMap](t, env.Client, ns, "cm")
	t.Logf("after the holder's apply without drop: data %v; managedFields:\n%s", got.Data, round10MF(t, ns))
	if _, ok := got.Data["drop"]; ok {
		t.Errorf("the holder's apply without drop left it: data %v", got.Data)
	}
}

// TestRound10ForgedEntryControl: TestRound10ForgedEntryNamedAsTheSyntheticOne with the forged entry under
// another name ("tool-x"): the rule judges it and refuses.
// Observed (52cd484): HELD (the control). Refused: "it gives ownership of data.drop in the entry of
// manager "tool-x" (Update) but presents no fencing token"; the holder's apply left data map[keep:2].
func TestRound10ForgedEntryControl(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	_, fc, editor := round10Covered(t, ns)
	err := round10Forge(t, editor, ns, "tool-x", `{"f:data":{"f:drop":{}}}`)
	t.Logf("the editor's forged write (manager tool-x owning data.drop): %v", round9Short(err))
	if err == nil {
		t.Errorf("a write without the token gave tool-x ownership of data.drop")
	}
	if err := fc.Apply(t.Context(), corev1ac.ConfigMap("cm", ns).WithData(map[string]string{"keep": "2"})); err != nil {
		t.Fatalf("the holder's apply without drop: %v", err)
	}
	got := testenv.Read[corev1.ConfigMap](t, env.Client, ns, "cm")
	t.Logf("after the holder's apply without drop: data %v", got.Data)
	if _, ok := got.Data["drop"]; ok {
		t.Errorf("the holder's apply without drop left it: data %v", got.Data)
	}
}

// TestRound10ForgedEntryOwnsOrphanAndAbsentFields: TestRound10ForgedEntryNamedAsTheSyntheticOne with the
// forged entry owning what no write without the token may give anyone: the finalizer orphan (I4: a
// co-owner keeps it through the holder's apply that drops it) and a data key the object does not have
// (every later write works through every field listed). The write must be refused.
// Observed (52cd484): WORKED. Admitted; stored: `(this write's own entry, merged by the apiserver into
// ancient-changes)/Update {"f:data":{"f:ghost":{}},"f:metadata":{"f:finalizers":{"v:\"orphan\"":{}}}}` on a
// ConfigMap that has neither.
// Closed (decision 0043), as TestRound10ForgedEntryNamedAsTheSyntheticOne.
func TestRound10ForgedEntryOwnsOrphanAndAbsentFields(t *testing.T) {
	operatortest.Start(t, env)
	ns := env.Namespace(t)
	_, _, editor := round10Covered(t, ns)
	const synthetic = "(this write's own entry, merged by the apiserver into " + admission.AncientChanges + ")"
	err := round10Forge(t, editor, ns, synthetic, `{"f:metadata":{"f:finalizers":{"v:\"orphan\"":{}}},"f:data":{"f:ghost":{}}}`)
	t.Logf("the editor's forged write (orphan, data.ghost): %v", round9Short(err))
	for _, e := range testenv.Read[corev1.ConfigMap](t, env.Client, ns, "cm").ManagedFields {
		if e.Manager == synthetic {
			t.Logf("stored: %s/%s %s", e.Manager, e.Operation, e.FieldsV1.GetRawString())
		}
	}
	if err == nil {
		t.Errorf("a write without the token gave a non-holder entry ownership of the finalizer orphan and of absent data.ghost")
	}
}

// round10Raise sets up namespace ns with a policy over ConfigMaps and a holder that applies n ConfigMaps
// at epoch 1; pad(name) pads each; it returns the time fence-on-acquire takes at epoch 2 (and its error).
func round10Raise(t *testing.T, n int, pad func(ns, name string)) (time.Duration, error) {
	t.Helper()
	ctx := t.Context()
	ns := env.Namespace(t)
	holder := newWorker(t, ns, "app-operator")
	holder.LeaseDuration = 10 * time.Minute
	holder.Fences.Objects = true
	grantObjects(t, ns, holder.User, "editor")
	env.Grant(t, ns, "holder-policies", []rbacv1.PolicyRule{{APIGroups: []string{fencingv1alpha1.GroupVersion.Group},
		Resources: []string{"fencingpolicies"}, Verbs: []string{"list"}}}, holder.User)
	declarePolicy(t, ns, "app", fencingv1alpha1.FencedObjects{Resource: "configmaps"})
	tok := holder.Acquire(t, ns, appLease, 1)
	fc := fencing.NewClient(holder.Client, tokenOf(tok))
	for i := range n {
		name := fmt.Sprintf("cm-%d", i)
		if err := retryRBAC(t, "the holder's ConfigMap", func() error {
			return fc.Apply(ctx, corev1ac.ConfigMap(name, ns).WithData(map[string]string{"k": "v"}))
		}); err != nil {
			t.Fatal(err)
		}
		pad(ns, name)
	}
	fo, err := fencing.FenceObjectsOnAcquireForConfig(holder.Config)
	if err != nil {
		t.Fatal(err)
	}
	tok2 := holder.Acquire(t, ns, appLease, 2)
	c, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	start := time.Now()
	err = fo.Raise(c, tok2)
	return time.Since(start), err
}

// TestRound10GhostFieldsSlowTheFence: the consequence on I3 of TestRound10ForgedEntryNamedAsTheSyntheticOne
// (the forged entry's fields are not judged, so it may list fields the object does not have): its bytes are
// counted in the bound (64 KiB), but it lists 4,500 fields in one entry, where what a write without the
// token may otherwise add to a covered ConfigMap is at most 128 entries (finalizers; its labels and
// annotations are fenced). Forty holder-applied ConfigMaps each: (baseline) padded by the editor with 120
// finalizers, or (ghost) given the editor's 11 finalizers and a forged entry of 4,500 absent data keys
// (58,512 bytes of fieldsV1). Fence-on-acquire at epoch 2 must take no more than twice the baseline plus 1 s.
// Observed (52cd484): WORKED. Baseline 739.7 ms (1.389 s in an earlier run; 285 ms with only the 11
// finalizers, the forgery refused at 5,000 keys: "grows ... from 1978 to 67022 bytes, over the bound of
// 65536"); ghost: 40 of 40 forgeries admitted, fence 6.250 s (8.4x). At this rate about 64 such objects
// pass the default 10 s PostAcquireTimeout.
// Closed (decision 0043), as TestRound10ForgedEntryNamedAsTheSyntheticOne: the forgery is refused.
func TestRound10GhostFieldsSlowTheFence(t *testing.T) {
	operatortest.Start(t, env)
	const n = 15 // 40 in the round; the ratio is the same
	editor := env.ClientAs(t, "editor")
	base, err := round10Raise(t, n, func(ns, name string) {
		var fs []string
		for i := range 120 {
			fs = append(fs, fmt.Sprintf("example.com/pad-%03d-%s", i, strings.Repeat("v", 50)))
		}
		patch := mustJSON(t, map[string]any{"metadata": map[string]any{"finalizers": fs}})
		if err := retryRBAC(t, "the editor's labels", func() error {
			return editor.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, patch), client.FieldOwner("pad"))
		}); err != nil {
			t.Fatalf("baseline padding of %s: %v", name, round9Short(err))
		}
		t.Cleanup(func() {
			_ = env.Client.Patch(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		})
	})
	t.Logf("baseline (120 finalizers each): fence %v, err %v", base, err)
	var b strings.Builder
	b.WriteString(`{"f:data":{`)
	for i := range 4500 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"f:g%04d":{}`, i)
	}
	b.WriteString(`}}`)
	ghost := b.String()
	const synthetic = "(this write's own entry, merged by the apiserver into " + admission.AncientChanges + ")"
	forged := 0
	padded, err := round10Raise(t, n, func(ns, name string) {
		round10Finalizers(t, editor, ns, name)
		if err := round10ForgeOn(t, editor, ns, name, synthetic, ghost); err == nil {
			forged++
		} else if name == "cm-0" {
			t.Logf("the forgery on %s: %v", name, round9Short(err))
		}
	})
	t.Logf("ghost (%d of %d forged, %d bytes of fields each): fence %v, err %v", forged, n, len(ghost), padded, err)
	if forged > 0 && padded > 2*base+time.Second {
		t.Errorf("fence-on-acquire took %v over objects padded with absent fields, against %v at the bounds", padded, base)
	}
}

// TestRound10EditorSwapsTheOperatorsAllowance: attack on decision 0042's allowance ("nobody else can
// spend it") and on the operator's status (whoever may write a FencedResource's status must not hide it),
// in bytes, without passing the CRD's 8 conditions. The operator keeps every condition it finds and adds
// its three with the allowance (+16 KiB). A write without the token that does not grow the part is
// admitted whatever its size, so the editor, each time the operator has added its conditions, replaces them
// by as many bytes of its own (longer messages in its five foreign conditions): the part never grows on
// the editor's writes, and grows by the operator's conditions on each of the operator's, until the
// operator's next write passes 64 + 16 KiB. The status must then still show Ready.
// Observed (52cd484): WORKED. After 28 swaps (all admitted; the editor's messages 30000, 30000, 19685, 1, 1
// chars, its bytes now past 64 KiB) the operator added no Ready in 5 s; the status showed only
// [example.com/C0..C4=True]; the operator user's patch adding its three conditions was refused: "grows its
// labels, annotations, ... from 81397 to 82471 bytes, over the bound of 81920 bytes for writes without the
// token".
// Closed (decision 0043): the operator drops others' conditions, so its write never grows the part.
func TestRound10EditorSwapsTheOperatorsAllowance(t *testing.T) {
	operatortest.Start(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	editor := round9Editor(t, ns, "editor")
	fr := &fencingv1alpha1.FencedResource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "decl"},
		Spec: fencingv1alpha1.FencedResourceSpec{LeaseName: appLease}}
	if err := retryRBAC(t, "the editor's declaration", func() error { return editor.Create(ctx, fr) }); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(fr)
	if ok, s := round10WaitStatus(t, key, 20*time.Second, round10HasReady); !ok {
		t.Fatalf("the operator wrote no status: %s", round10Conds(s.Conditions))
	}
	foreign := func(msgs []int) []metav1.Condition {
		var cs []metav1.Condition
		for i, n := range msgs {
			cs = append(cs, metav1.Condition{Type: fmt.Sprintf("example.com/C%d", i), Status: metav1.ConditionTrue, Reason: "Padding",
				Message: strings.Repeat("x", n), LastTransitionTime: metav1.NewTime(time.Unix(1700000000, 0))})
		}
		return cs
	}
	msgs := []int{30000, 30000, 1, 1, 1}
	got := get(t, key)
	got.Status.Conditions = foreign(msgs)
	if err := editor.Status().Update(ctx, got); err != nil {
		t.Fatalf("the editor's first status: %v", round9Short(err))
	}
	cycles, hidden := 0, false
	for cycles < 60 {
		ok, s := round10WaitStatus(t, key, 5*time.Second, round10HasReady)
		if !ok {
			hidden = true
			t.Logf("after %d swaps the operator added no Ready in 5 s: %s", cycles, round10Conds(s.Conditions))
			break
		}
		// The operator's three conditions' bytes, given to the editor's messages.
		cur := get(t, key)
		var ops []metav1.Condition
		for _, c := range cur.Status.Conditions {
			if !strings.HasPrefix(c.Type, "example.com/") {
				ops = append(ops, c)
			}
		}
		add := len(mustJSON(t, ops))
		swapped := false
		for slack := 0; slack < add; slack += 50 {
			next := slices.Clone(msgs)
			rest := add - slack
			for i := 2; i < len(next) && rest > 0; i++ {
				d := min(rest, 32000-next[i])
				next[i] += d
				rest -= d
			}
			cur.Status.Conditions = foreign(next)
			err := editor.Status().Update(ctx, cur.DeepCopy())
			if err == nil {
				msgs, swapped = next, true
				break
			}
			if !strings.Contains(err.Error(), "grows") {
				t.Logf("the editor's swap %d: %v", cycles, round9Short(err))
				break
			}
		}
		if !swapped {
			t.Logf("the editor's swap %d found no size that does not grow the part (operator's conditions %d bytes)", cycles, add)
			break
		}
		cycles++
	}
	t.Logf("%d swaps; the editor's messages %v", cycles, msgs)
	if hidden {
		cur := get(t, key)
		patch := client.MergeFrom(cur.DeepCopy())
		for _, c := range []string{fencingv1alpha1.ConditionReady, fencingv1alpha1.ConditionLeaseFound, fencingv1alpha1.ConditionFenced} {
			meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionFalse, Reason: "LeaseNotFound",
				Message: "lease app-writer does not exist in namespace " + ns + "; every fenced write is refused until an elector creates it"})
		}
		perr := env.Client.Status().Patch(ctx, cur, patch)
		t.Logf("the operator user's status patch adding its three conditions: %v", round9Short(perr))
		t.Errorf("the operator's status is hidden after %d swaps by the editor", cycles)
	}
}
