package attack

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencekit/fencekit/pkg/fencing"
	"github.com/fencekit/fencekit/test/util/operatortest"
	"github.com/fencekit/fencekit/test/util/testenv"
)

// TestAttack runs the seeded attacker against one world and checks the invariants after every step (see
// the package documentation). Replay a failure with the seed and step it prints.
func TestAttack(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64() //nolint:gosec // a seed, printed
	}
	t.Logf("seed %d; replay: %s", seed, replayCommand(seed, *flagSteps, *flagDuration))
	if *flagGC {
		env.ControllerManager(t, testenv.WithControllerManagerArg("controllers", "garbagecollector,root-ca-cert-publisher"))
	}
	operatortest.Start(t, env)
	routes, skipped, err := discoverRoutes(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		t.Logf("route %s (%s): verbs %v", r, r.kind, r.verbs)
	}
	for _, s := range skipped {
		t.Logf("route %s: skipped", s)
	}
	w := newWorld(t, routes, *flagGC)
	t.Cleanup(func() { w.holder.stop() })
	a := &attack{t: t, w: w, seed: seed, stats: newStats(), i2rng: rand.New(rand.NewPCG(seed, 2)), i3rng: rand.New(rand.NewPCG(seed, 3)),
		reported: map[string]int{}}
	a.model, _ = w.read()
	gen := newGenerator(seed, routes)
	start := time.Now()
	lastAcquire := 0
	done := func() bool {
		if len(gen.queue) > 0 { // a scripted sequence runs to its end
			return t.Context().Err() != nil || a.fatal
		}
		return *flagSteps > 0 && gen.n >= *flagSteps || *flagDuration > 0 && time.Since(start) > *flagDuration ||
			t.Context().Err() != nil || a.fatal
	}
	for !done() {
		s := gen.next()
		a.do(s)
		if s.n-lastAcquire >= *flagEvery && len(gen.queue) == 0 {
			a.acquisition(&s)
			lastAcquire = s.n
		}
	}
	if lastAcquire != gen.n && !a.fatal {
		a.acquisition(nil)
	}
	a.summary(gen.n, time.Since(start))
}

func replayCommand(seed uint64, steps int, d time.Duration) string {
	return fmt.Sprintf("go test ./test/attack -run '^TestAttack$' -v -count=1 -timeout 0 -args -attack.seed=%d -attack.steps=%d -attack.duration=%s -attack.acquire-every=%d",
		seed, steps, d, *flagEvery)
}

// attack is one run: the world, the holder's model of it, the story so far and the counts.
type attack struct {
	t     *testing.T
	w     *world
	seed  uint64
	model model
	stats *stats
	// story is the last steps and what the harness did, for a violation's report.
	story    []string
	i2rng    *rand.Rand
	i3rng    *rand.Rand
	reported map[string]int
	fatal    bool
	// declared lists the declaration steps, for I3's report.
	declared []string
	// deletion is the holder's delete of the owner under test (I4), from kHolderDelete to kFinishDelete.
	deletion *deletion
}

// deletion is the state of a holder's delete of the owner (I4).
type deletion struct {
	step     int
	policy   string
	ownerUID string
	// finalizers are the owner's garbage-collection finalizers right after the holder's delete; nil if it
	// was deleted at once.
	finalizers *string
	violated   bool
}

func (a *attack) tellf(format string, args ...any) {
	a.story = append(a.story, fmt.Sprintf(format, args...))
	if len(a.story) > 14 {
		a.story = a.story[len(a.story)-14:]
	}
}

// violate reports a violation of inv at step s (nil: at the end of the run).
func (a *attack) violate(inv string, s *step, what string) {
	key := inv + " " + strings.Split(what, ":")[0]
	a.reported[key]++
	a.stats.violations[inv]++
	if a.reported[key] > 3 {
		return
	}
	at, n, who := "at the end of the run", 0, ""
	if s != nil {
		at, n = fmt.Sprintf("at step %d", s.n), s.n
		who = fmt.Sprintf("\n  actor: %s, route: %s", s.actor, strings.TrimSpace(strings.ToUpper(s.verb)+" "+s.route.String()))
	}
	steps := *flagSteps
	if s != nil {
		steps = n
	}
	a.t.Errorf("VIOLATION %s %s (seed %d)%s\n  %s\n  what: %s\n  replay: %s\n  the story before it:\n    %s",
		inv, at, a.seed, who, stepLine(s), what, replayCommand(a.seed, steps, 0), strings.Join(a.story, "\n    "))
}

func stepLine(s *step) string {
	if s == nil {
		return "(no step)"
	}
	return s.String()
}

// do runs one step and checks the invariants after it.
func (a *attack) do(s step) {
	w := a.w
	var r result
	var l *loops
	var lease *unstructured.Unstructured
	t0 := time.Now()
	switch s.kind {
	case kLease:
		lease = w.lease()
		r = w.leaseWrite(s)
	case kWrite:
		r = w.write(s)
	case kPad:
		r = w.pad(s)
	case kDeclare:
		r = w.declare(s)
	case kLoop:
		l = w.startLoops(s)
		time.Sleep(200 * time.Millisecond) // the loops run before and while the holder writes
		r = result{outcome: admitted}
	case kHolderDelete:
		r = a.holderDelete(s)
	case kFinishDelete:
		r = a.finishDelete(s)
	}
	a.stats.count(s, r)
	if s.kind == kDeclare {
		a.declared = append(a.declared, fmt.Sprintf("step %d (%d)", s.n, r.nAdmitted))
	}
	line := s.String() + " -> " + r.String()
	if r.detail != "" {
		line += " [" + r.detail + "]"
	}
	a.tellf("%s", line)
	t1 := time.Now()
	a.checkContent(&s, r)
	a.checkDeletion(&s)
	did, err := w.ensure(a.deletion != nil)
	for _, d := range did {
		a.tellf("  %s", d)
	}
	if err != nil {
		a.violate("I2 (headroom)", &s, "the holder could not put the world back: "+err.Error())
	}
	t2 := time.Now()
	a.checkHeadroom(&s, l)
	if s.kind == kLease && lease != nil {
		a.checkLease(&s, r, lease)
	}
	a.model, _ = w.read()
	if testing.Verbose() {
		a.t.Logf("%s (%v; checks %v; holder %v)", line, t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
	}
}

// checkContent is I1: no write without the current token changed a fenced object's fenced content.
func (a *attack) checkContent(s *step, r result) {
	w := a.w
	actor := w.actors[s.actor]
	if s.kind == kWrite && r.outcome == admitted && actor != nil {
		if what := createdCovered(r.returned); s.verb == "create" && what != "" && !isWorldName(s.route.parent.Resource, s.target) {
			dry := ""
			if s.dryRun {
				dry = " (dry run: it would have)"
			}
			a.violate("I1 (content)", s, what+dry)
		}
		// A dry run changes nothing: compare what the apiserver says it would store.
		if s.dryRun && r.returned != nil && isWorldName(s.route.parent.Resource, s.target) && r.returned.GetKind() == s.route.parentKind {
			o := worldObject{s.route.parent.Resource, s.route.parentKind, s.target}
			for _, f := range diff(o.String(), a.model[o], contentOf(r.returned)) {
				if f.field != "object" && !allowed(actor, o, a.model[o], f, false) {
					a.violate("I1 (content)", s, "a dry run admitted without the token would change "+f.String())
				}
			}
		}
	}
	now, objs := w.read()
	owner := objs[worldObject{"configmaps", "ConfigMap", ownerName}]
	ownerGone := owner == nil || owner.GetDeletionTimestamp() != nil
	for _, o := range worldObjects() {
		if a.deletion != nil && (o.name == ownerName || o.name == dependentName) {
			continue // I4 decides
		}
		changes := diff(o.String(), a.model[o], now[o])
		if i := slices.IndexFunc(changes, func(f fieldChange) bool { return f.field == "object" }); i >= 0 {
			changes = changes[i : i+1] // deleted (or made again): one change, whatever the object held
		}
		for _, f := range changes {
			if s.kind == kHolderDelete || s.kind == kFinishDelete {
				continue
			}
			if allowed(actor, o, a.model[o], f, ownerGone) {
				continue
			}
			switch {
			case r.outcome == admitted || r.nAdmitted > 0:
				a.violate("I1 (content)", s, "admitted without the current token, it changed "+f.String())
			default:
				a.violate("I1 (content)", s, "changed while the step was refused (by a loop, the garbage collector or an earlier write): "+f.String())
			}
		}
	}
}

// holderDelete is the holder's delete of the owner with its fenced client (I4 starts).
func (a *attack) holderDelete(s step) result {
	w := a.w
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	owner := w.get(ctx, "configmaps", ownerName)
	if owner == nil {
		return result{outcome: rejected, msg: "the owner does not exist"}
	}
	var opts []client.DeleteOption
	if s.policy != "" {
		opts = append(opts, client.PropagationPolicy(metav1.DeletionPropagation(s.policy)))
	}
	err := w.fenced().Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: ownerName}}, opts...)
	r := classify(err)
	if err != nil {
		a.violate("I4 (delete semantics)", &s, "the holder's delete of the owner failed: "+err.Error())
		return r
	}
	d := &deletion{step: s.n, policy: s.policy, ownerUID: string(owner.GetUID())}
	a.deletion = d
	after := w.get(ctx, "configmaps", ownerName)
	if after == nil || string(after.GetUID()) != d.ownerUID {
		r.detail = "the owner is gone at once"
		return r
	}
	f := contentOf(after)["metadata.finalizers (orphan, foregroundDeletion)"]
	d.finalizers = &f
	r.detail = fmt.Sprintf("the owner is being deleted, finalizers %v", after.GetFinalizers())
	want := map[string]string{"": "", "Background": "", "Foreground": "foregroundDeletion"}[s.policy]
	if f != want {
		d.violated = true
		a.violate("I4 (delete semantics)", &s, fmt.Sprintf("the holder's delete with %s propagation left garbage-collection finalizers %q on the owner, want %q: an orphaning (or foreground) delete it did not ask for",
			policyName2(s.policy), f, want))
	}
	return r
}

func policyName2(p string) string {
	if p == "" {
		return "the default (Background)"
	}
	return p
}

// checkDeletion is I4's second half: while the owner's deletion is in progress, no write changes its
// propagation (the orphan and foregroundDeletion finalizers the holder's delete left).
func (a *attack) checkDeletion(s *step) {
	d := a.deletion
	if d == nil || d.finalizers == nil || d.violated || s.kind == kHolderDelete {
		return
	}
	owner := a.w.get(context.Background(), "configmaps", ownerName)
	if owner == nil || string(owner.GetUID()) != d.ownerUID {
		return
	}
	// The garbage collector acts on an orphan finalizer at once (it orphans the dependents, then removes
	// the finalizer): a dependent that lost its owner while the owner still exists was orphaned.
	if dep := a.w.get(context.Background(), "configmaps", dependentName); a.w.gc && dep != nil && d.policy != "Orphan" && !ownedByUID(dep, d.ownerUID) && !d.violated {
		d.violated = true
		a.violate("I4 (delete semantics)", s, fmt.Sprintf("the holder's delete (step %d, %s propagation) is in progress and its dependent was orphaned: ownerReferences now %s",
			d.step, policyName2(d.policy), js(dep.GetOwnerReferences())))
		return
	}
	f := contentOf(owner)["metadata.finalizers (orphan, foregroundDeletion)"]
	if f == "" && *d.finalizers == "foregroundDeletion" && a.w.gc {
		// The garbage collector removes foregroundDeletion once the dependents are gone: what the holder
		// asked, done.
		if dep := a.w.get(context.Background(), "configmaps", dependentName); dep == nil || !ownedByUID(dep, d.ownerUID) {
			*d.finalizers = f
			return
		}
	}
	if f != *d.finalizers {
		d.violated = true
		a.violate("I4 (delete semantics)", s, fmt.Sprintf("the propagation of the holder's delete (step %d) changed: the owner's garbage-collection finalizers went %q -> %q",
			d.step, *d.finalizers, f))
		*d.finalizers = f
	}
}

// finishDelete lets the owner's deletion complete and checks that its dependent was deleted, as the
// holder's delete asked (I4), then the holder makes both again.
func (a *attack) finishDelete(s step) result {
	w := a.w
	d := a.deletion
	a.deletion = nil
	if d == nil {
		return result{outcome: rejected, msg: "no deletion in progress"}
	}
	r := result{outcome: admitted}
	if err := w.gone(worldObject{"configmaps", "ConfigMap", ownerName}); err != nil {
		r = result{outcome: failed, msg: err.Error()}
	}
	if w.gc && !d.violated {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var dep string
		err := waitUntil(ctx, func() bool {
			u := w.get(ctx, "configmaps", dependentName)
			dep = fmt.Sprint(contentOf(u))
			return u == nil || !slices.ContainsFunc(u.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return string(r.UID) == d.ownerUID })
		})
		cancel()
		u := w.get(context.Background(), "configmaps", dependentName)
		switch {
		case err != nil:
			r.detail = "the garbage collector has not acted on the dependent after 30 s: " + dep
		case u != nil && string(u.GetUID()) != "" && !ownedByUID(u, d.ownerUID):
			a.violate("I4 (delete semantics)", &s, fmt.Sprintf("the holder's delete (step %d, %s propagation) of the owner orphaned its dependent instead of deleting it: %s",
				d.step, policyName2(d.policy), dep))
		default:
			r.detail = "the dependent was deleted with its owner"
		}
	}
	return r
}

func ownedByUID(u interface {
	GetOwnerReferences() []metav1.OwnerReference
}, uid string) bool {
	return slices.ContainsFunc(u.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return string(r.UID) == uid })
}

func waitUntil(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// checkHeadroom is I2: the holder's writes of every kind succeed after the step (while its loops run).
func (a *attack) checkHeadroom(s *step, l *loops) {
	w := a.w
	if w.token().IsZero() {
		a.violate("I2 (headroom)", s, "the holder's elector no longer leads: "+w.holder.identity)
		a.fatal = true
		return
	}
	vals := func(n int) string { return strings.Repeat("x", a.i2rng.IntN(n+1)) }
	for _, hw := range w.headroom(*s, vals) {
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		err := hw.run(ctx)
		cancel()
		a.stats.i2++
		if err != nil {
			a.stats.i2Failed++
			a.violate("I2 (headroom)", s, fmt.Sprintf("the holder's %s failed: %v", hw.name, err))
		}
	}
	if l != nil {
		a.tellf("  loops: %s", l.stop(w, *s))
	}
}

// acquisition is I3: a new elector of the holder's user, at the elector's defaults with fence-on-acquire,
// leads within acquireBound, and the previous holder's writes are then refused.
func (a *attack) acquisition(s *step) {
	w := a.w
	crash := a.i3rng.Float64() < 0.25
	how := "the holder releases the Lease"
	if crash {
		how = "the holder crashes (its Lease must expire)"
	}
	bound, _ := w.boundCount()
	start := time.Now()
	old, err := w.acquire(crash)
	a.stats.i3++
	if err != nil {
		a.violate("I3 (acquisition)", s, fmt.Sprintf("%s; %v; declarations by the attackers: %s", how, err, strings.Join(a.declared, ", ")))
		a.tellf("I3: %s; no elector led; the admin removes the attackers' declarations and tries again", how)
		if cerr := w.clearDeclarations(); cerr != nil {
			a.t.Errorf("removing the declarations: %v", cerr)
		}
		w.holder = nil
		if _, err := w.acquire(false); err != nil {
			a.t.Errorf("the holder cannot lead again even without the declarations, stopping: %v", err)
			a.fatal = true
			return
		}
	} else {
		a.tellf("I3: %s; elector %s leads at epoch %d after %v (%d FencedResources bound)", how, w.holder.identity, w.token().Epoch,
			time.Since(start).Round(time.Millisecond), bound)
	}
	if !old.IsZero() {
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		defer cancel()
		staleCM := fencing.NewClient(w.holderC, tokenFunc(old)).Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "config"}},
			client.RawPatch("application/merge-patch+json", []byte(`{"data":{"v":"stale"}}`)))
		if staleCM == nil || !fencing.IsFenced(staleCM) {
			a.violate("I3 (acquisition)", s, fmt.Sprintf("the previous holder's write at epoch %d after the acquisition of epoch %d: %s, want refused", old.Epoch, w.token().Epoch, testenv.ErrString(staleCM)))
		}
		_, staleFR := fencing.NewWriter(w.holderC).Set(ctx, old, w.key("fr-0"), map[string]any{"v": "stale"})
		if staleFR == nil || !fencing.IsFenced(staleFR) {
			a.violate("I3 (acquisition)", s, fmt.Sprintf("the previous holder's Writer.Set at epoch %d after the acquisition of epoch %d: %s, want refused", old.Epoch, w.token().Epoch, testenv.ErrString(staleFR)))
		}
	}
	did, err := w.ensure(a.deletion != nil)
	for _, d := range did {
		a.tellf("  %s", d)
	}
	if err != nil {
		a.violate("I2 (headroom)", s, "the holder could not put the world back after the acquisition: "+err.Error())
	}
	a.model, _ = w.read()
}

// stats counts what a run did.
type stats struct {
	byActor    map[string]map[string]int
	byRoute    map[string]map[string]int
	i2         int
	i2Failed   int
	i3         int
	violations map[string]int
}

func newStats() *stats {
	return &stats{byActor: map[string]map[string]int{}, byRoute: map[string]map[string]int{}, violations: map[string]int{}}
}

func (st *stats) count(s step, r result) {
	actor, route := s.actor, fmt.Sprintf("%s %s", strings.ToUpper(s.verb), s.route)
	switch s.kind {
	case kPad:
		route = "PAD managedFields " + s.route.String()
	case kDeclare:
		route = "DECLARE fencedresources"
	case kLoop:
		route = "LOOP " + s.loop + " " + s.route.String()
	case kHolderDelete, kFinishDelete:
		route = "HOLDER DELETE configmaps"
	case kLease:
		route = fmt.Sprintf("%s %s (the holder's)", strings.ToUpper(s.verb), s.route)
	case kWrite:
	}
	for _, mk := range []struct {
		m map[string]map[string]int
		k string
	}{{st.byActor, actor}, {st.byRoute, route}} {
		if mk.m[mk.k] == nil {
			mk.m[mk.k] = map[string]int{}
		}
		mk.m[mk.k][r.outcome]++
		mk.m[mk.k]["steps"]++
	}
}

func (a *attack) summary(steps int, took time.Duration) {
	st := a.stats
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d steps in %v; %d holder writes checked (I2), %d failed; %d acquisitions (I3)\n", a.seed, steps,
		took.Round(time.Second), st.i2, st.i2Failed, st.i3)
	table := func(title string, m map[string]map[string]int) {
		fmt.Fprintf(&b, "%s:\n", title)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			c := m[k]
			fmt.Fprintf(&b, "  %-58s %4d steps: %3d admitted, %3d refused by fencekit, %3d rejected by the apiserver, %3d errors\n",
				k, c["steps"], c[admitted], c[refused], c[rejected], c[failed])
		}
	}
	table("by actor", st.byActor)
	table("by route", st.byRoute)
	if len(st.violations) == 0 {
		b.WriteString("no violations\n")
	}
	for _, k := range slices.Sorted(maps.Keys(st.violations)) {
		fmt.Fprintf(&b, "violations of %s: %d\n", k, st.violations[k])
	}
	a.t.Logf("summary\n%s", b.String())
}
