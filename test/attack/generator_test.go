package attack

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// stepKind is what a step does.
type stepKind int

const (
	// kWrite is one request of one actor over one route.
	kWrite stepKind = iota
	// kPad is a managedFields-only write that pads an entry toward etcd's request limit.
	kPad
	// kDeclare creates many FencedResources bound to the holder's Lease (declaring is free).
	kDeclare
	// kLoop runs tight loops of free writes while the holder writes and deletes (I2).
	kLoop
	// kHolderDelete is the holder's delete of the owner ConfigMap, with its fenced client (I4 starts).
	kHolderDelete
	// kFinishDelete lets the owner's deletion complete and checks its dependent (I4 ends).
	kFinishDelete
	// kLease is a write of the holder's Lease by one of its other writers (lease_test.go).
	kLease
)

// managerSpec is the field manager a write presents: none, a tool's name, a token relative to the Lease's
// current epoch (resolved when the step runs), or a raw string.
type managerSpec struct {
	kind string // "none", "tool", "epoch", "raw"
	name string
	rel  int64
}

func (m managerSpec) String() string {
	switch m.kind {
	case "tool", "raw":
		return fmt.Sprintf("fieldManager=%q", m.name)
	case "epoch":
		switch {
		case m.rel == 0:
			return "fieldManager=token(current epoch)"
		case m.rel > 0:
			return fmt.Sprintf("fieldManager=token(current epoch+%d)", m.rel)
		default:
			return fmt.Sprintf("fieldManager=token(current epoch%d)", m.rel)
		}
	}
	return "no fieldManager"
}

// deleteSpec is a DELETE's options, and a deletecollection's selector.
type deleteSpec struct {
	propagation      string // "", Orphan, Background, Foreground
	orphanDependents string // "", "true", "false"
	grace            int64  // -1: unset
	precondition     string // "", "rv", "stale-rv", "uid", "wrong-uid"
	selector         string // deletecollection's label selector
}

func (d deleteSpec) String() string {
	var parts []string
	if d.propagation != "" {
		parts = append(parts, "propagationPolicy="+d.propagation)
	}
	if d.orphanDependents != "" {
		parts = append(parts, "orphanDependents="+d.orphanDependents)
	}
	if d.grace >= 0 {
		parts = append(parts, fmt.Sprintf("gracePeriodSeconds=%d", d.grace))
	}
	if d.precondition != "" {
		parts = append(parts, "precondition="+d.precondition)
	}
	if d.selector != "" {
		parts = append(parts, "labelSelector="+d.selector)
	}
	if len(parts) == 0 {
		return "default options"
	}
	return strings.Join(parts, ", ")
}

// change is what a write changes: a named mutation of the object, with its parameters.
type change struct {
	name  string
	key   string
	value string
	n     int
}

func (c change) String() string {
	s := c.name
	if c.key != "" {
		s += " " + c.key
	}
	if c.value != "" {
		v := c.value
		if len(v) > 40 {
			v = fmt.Sprintf("%s... (%d bytes)", v[:20], len(v))
		}
		s += "=" + v
	}
	if c.n != 0 {
		s += fmt.Sprintf(" (n=%d)", c.n)
	}
	return s
}

// step is one step of a run: generated from the seed alone, so that a seed replays the same steps.
type step struct {
	n       int
	kind    stepKind
	actor   string
	route   route
	verb    string // create, update, merge, json, strategic, apply, delete, deletecollection
	target  string
	change  change
	manager managerSpec
	dryRun  bool
	force   bool
	del     deleteSpec
	count   int    // declarations; padding margin (KiB below the limit); loop goroutines
	entry   string // padding: which managedFields entry ("other", "own", "epoch")
	loop    string // loop: relabel, annotate, finalizers
	policy  string // kHolderDelete: the holder's propagationPolicy ("" for the default)
}

func (s step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d: ", s.n)
	switch s.kind {
	case kWrite:
		fmt.Fprintf(&b, "%s %s %s %s", s.actor, strings.ToUpper(s.verb), s.route, s.target)
		if s.verb == "delete" || s.verb == "deletecollection" {
			fmt.Fprintf(&b, " (%s)", s.del)
		} else {
			fmt.Fprintf(&b, ": %s (%s", s.change, s.manager)
			if s.force {
				b.WriteString(", force")
			}
			b.WriteString(")")
		}
	case kPad:
		fmt.Fprintf(&b, "%s pads managedFields of %s %s (entry: %s) to %d KiB below etcd's request limit with a %s (%s)",
			s.actor, s.route.parentKind, s.target, s.entry, s.count, verbName(s.verb), s.manager)
	case kDeclare:
		fmt.Fprintf(&b, "%s declares %d FencedResources bound to the holder's Lease", s.actor, s.count)
	case kLoop:
		fmt.Fprintf(&b, "%s runs %d loops of %s on %s %s while the holder writes and deletes", s.actor, s.count, s.loop, s.route.parentKind, s.target)
	case kHolderDelete:
		p := s.policy
		if p == "" {
			p = "the default propagation"
		}
		fmt.Fprintf(&b, "the holder deletes ConfigMap %s with its fenced client (%s)", s.target, p)
	case kFinishDelete:
		fmt.Fprintf(&b, "the deletion of ConfigMap %s completes (free finalizers removed)", s.target)
	case kLease:
		if s.verb == "delete" {
			fmt.Fprintf(&b, "%s DELETE the holder's Lease %s (%s)", s.actor, s.target, s.del)
		} else {
			fmt.Fprintf(&b, "%s %s the holder's Lease %s: %s (%s", s.actor, strings.ToUpper(s.verb), s.target, s.change, s.manager)
			if s.force {
				b.WriteString(", force")
			}
			b.WriteString(")")
		}
	}
	if s.dryRun {
		b.WriteString(" [dry run]")
	}
	return b.String()
}

func verbName(v string) string {
	switch v {
	case "merge":
		return "merge patch"
	case "json":
		return "JSON patch"
	case "strategic":
		return "strategic merge patch"
	case "apply":
		return "server-side apply"
	}
	return v
}

// The world's objects, by kind.
var (
	configMaps      = []string{"config", "cm-gitops", "cm-owner", "cm-dependent", "cm-scratch"}
	fencedResources = []string{"fr-0", "fr-1", "fr-2", "fr-scratch"}
	pods            = []string{"pod-0"}
)

const (
	ownerName     = "cm-owner"
	dependentName = "cm-dependent"
	scratchCM     = "cm-scratch"
	scratchFR     = "fr-scratch"
	// maxDeclarations is how many FencedResources the attackers declare in a run, at most.
	maxDeclarations = 1500
)

// Actors. The stale holder is the holder's user presenting an earlier epoch; the others are users of
// their own.
const (
	actorStale     = "stale-holder"
	actorOther     = "other-elector"
	actorEditor    = "editor"
	actorGitOps    = "gitops"
	actorGC        = "garbage-collector"
	actorScheduler = "scheduler"
	actorDeploy    = "deployment-controller"
	actorKCM       = "kube-controller-manager"
	actorKubelet   = "kubelet" // node-b's
	kubeletNode    = "node-b"
)

// generator is the seeded generator: steps come from the seed alone, never from what earlier steps did,
// so that a seed replays the same steps (what a step meets on the apiserver may differ).
type generator struct {
	rng      *rand.Rand
	routes   []route
	n        int
	queue    []step
	declared int
	newNames int
	// unvisited are the routes no random write has taken yet: the first random writes take each once, in
	// a seeded order, so that a short run exercises every route.
	unvisited []route
}

func newGenerator(seed uint64, routes []route) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), routes: routes}
	g.unvisited = slices.Clone(routes)
	g.rng.Shuffle(len(g.unvisited), func(i, j int) { g.unvisited[i], g.unvisited[j] = g.unvisited[j], g.unvisited[i] })
	return g
}

type weighted[T any] struct {
	w int
	v T
}

func pick[T any](r *rand.Rand, choices ...weighted[T]) T {
	total := 0
	for _, c := range choices {
		total += c.w
	}
	x := r.IntN(total)
	for _, c := range choices {
		if x < c.w {
			return c.v
		}
		x -= c.w
	}
	panic("unreachable")
}

func oneOf[T any](r *rand.Rand, vs ...T) T { return vs[r.IntN(len(vs))] }

func (g *generator) chance(p float64) bool { return g.rng.Float64() < p }

// next returns the next step.
func (g *generator) next() step {
	if len(g.queue) == 0 {
		g.queue = g.plan()
	}
	s := g.queue[0]
	g.queue = g.queue[1:]
	g.n++
	s.n = g.n
	return s
}

// plan generates the next step, or a short scripted sequence (a deletion while others write).
func (g *generator) plan() []step {
	what := pick(g.rng,
		weighted[string]{42, "write"},
		weighted[string]{10, "pad"},
		weighted[string]{3, "declare"},
		weighted[string]{6, "binding"},
		weighted[string]{5, "gc-finalizer"},
		weighted[string]{7, "deletion"},
		weighted[string]{7, "loop"},
		weighted[string]{4, "ownership"},
		weighted[string]{6, "lease"},
	)
	switch what {
	case "pad":
		return []step{g.pad()}
	case "declare":
		if g.declared >= maxDeclarations {
			return []step{g.write()}
		}
		n := min(200+g.rng.IntN(600), maxDeclarations-g.declared)
		g.declared += n
		return []step{{kind: kDeclare, actor: oneOf(g.rng, actorEditor, actorGitOps), count: n}}
	case "binding":
		return []step{g.binding()}
	case "gc-finalizer":
		s := g.writeOn(g.routeOf("", "configmaps", ""), oneOf(g.rng, ownerName, ownerName, oneOf(g.rng, configMaps...)))
		s.change = change{name: "finalizer-add", value: oneOf(g.rng, "orphan", "foregroundDeletion")}
		s.verb = oneOf(g.rng, "merge", "json", "strategic", "apply", "update")
		return []step{s}
	case "deletion":
		return g.deletion()
	case "loop":
		return []step{g.loopStep()}
	case "lease":
		return []step{g.leaseStep()}
	case "ownership":
		s := g.writeOn(g.routeOf("", "configmaps", ""), oneOf(g.rng, configMaps...))
		if g.chance(0.4) {
			s = g.writeOn(g.routeOf("fencing.fencekit.io", "fencedresources", ""), oneOf(g.rng, fencedResources...))
		}
		s.change = change{name: oneOf(g.rng, "managed-move", "managed-epoch-entry", "managed-gain-free")}
		s.verb = oneOf(g.rng, "merge", "json", "update")
		return []step{s}
	}
	return []step{g.write()}
}

// routeOf is the route group/resource/sub (a zero route if discovery did not list it).
func (g *generator) routeOf(group, resource, sub string) route {
	for _, r := range g.routes {
		if r.gvr.Group == group && r.gvr.Resource == resource && r.sub == sub {
			return r
		}
	}
	return route{gvr: schema.GroupVersionResource{Group: group, Version: "v1", Resource: resource}, sub: sub,
		parent: schema.GroupResource{Group: group, Resource: resource}}
}

func (g *generator) actor() string {
	return pick(g.rng,
		weighted[string]{6, actorStale}, weighted[string]{4, actorOther}, weighted[string]{6, actorEditor},
		weighted[string]{4, actorGitOps}, weighted[string]{1, actorGC}, weighted[string]{2, actorScheduler},
		weighted[string]{1, actorDeploy}, weighted[string]{1, actorKCM}, weighted[string]{1, actorKubelet})
}

// managerFor is a field manager actor might present.
func (g *generator) managerFor(actor string) managerSpec {
	tok := func(rel int64) managerSpec { return managerSpec{kind: "epoch", rel: rel} }
	tool := func(name string) managerSpec { return managerSpec{kind: "tool", name: name} }
	raw := func(name string) managerSpec { return managerSpec{kind: "raw", name: name} }
	none := managerSpec{kind: "none"}
	switch actor {
	case actorStale:
		return pick(g.rng, weighted[managerSpec]{10, tok(-1)}, weighted[managerSpec]{3, tok(-2)}, weighted[managerSpec]{2, tok(1)},
			weighted[managerSpec]{3, none}, weighted[managerSpec]{2, tool("kubectl-edit")})
	case actorOther:
		return pick(g.rng, weighted[managerSpec]{7, tok(0)}, weighted[managerSpec]{2, tok(-1)}, weighted[managerSpec]{2, tok(1)},
			weighted[managerSpec]{6, none}, weighted[managerSpec]{3, raw("fencing.fencekit.io/epoch=0")})
	case actorEditor:
		return pick(g.rng, weighted[managerSpec]{8, none}, weighted[managerSpec]{4, tool("kubectl-client-side-apply")},
			weighted[managerSpec]{4, tok(0)}, weighted[managerSpec]{2, raw("fencing.fencekit.io/epoch=01")}, weighted[managerSpec]{2, tok(-1)})
	case actorGitOps:
		return pick(g.rng, weighted[managerSpec]{14, tool("argocd-controller")}, weighted[managerSpec]{4, tok(0)}, weighted[managerSpec]{2, none})
	}
	return pick(g.rng, weighted[managerSpec]{5, none}, weighted[managerSpec]{3, tool(actor)}, weighted[managerSpec]{2, tok(0)})
}

// write is a random write: a random actor, route, verb, object and change.
func (g *generator) write() step {
	r := g.routes[g.rng.IntN(len(g.routes))]
	if len(g.unvisited) > 0 {
		r, g.unvisited = g.unvisited[0], g.unvisited[1:]
	}
	return g.writeOn(r, g.targetOf(r))
}

// targetOf is a world object of r's parent kind.
func (g *generator) targetOf(r route) string {
	switch r.parent.Resource {
	case "configmaps":
		return oneOf(g.rng, configMaps...)
	case "fencedresources":
		return oneOf(g.rng, fencedResources...)
	}
	return oneOf(g.rng, pods...)
}

// writeOn is a random write over r to target.
func (g *generator) writeOn(r route, target string) step {
	s := step{kind: kWrite, actor: g.actor(), route: r, target: target, dryRun: g.chance(0.12), force: g.chance(0.5)}
	s.manager = g.managerFor(s.actor)
	var verbs []string
	for _, v := range r.verbs {
		switch v {
		case "create", "update", "delete", "deletecollection":
			verbs = append(verbs, v)
		case "patch":
			verbs = append(verbs, "merge", "json", "apply", "merge", "json", "apply")
			if r.builtIn() {
				verbs = append(verbs, "strategic", "strategic")
			}
		}
	}
	if len(verbs) == 0 {
		verbs = []string{"update"}
	}
	s.verb = oneOf(g.rng, verbs...)
	// Deletes are a fifth of the writes where the route has them: they are the bluntest.
	if slices.Contains(verbs, "delete") && s.verb != "delete" && s.verb != "deletecollection" && g.chance(0.06) {
		s.verb = "delete"
	}
	switch s.verb {
	case "delete", "deletecollection":
		s.del = g.deleteOptions()
		if s.verb == "deletecollection" {
			s.del.selector = oneOf(g.rng, "", "app=fenced", "attack.fencekit.io/world=true")
		}
	case "create":
		if r.sub == "" && !r.topLevel && g.chance(0.6) {
			g.newNames++
			s.target = fmt.Sprintf("atk-%d", g.newNames)
		}
	}
	s.change = g.changeFor(r, s.verb)
	return s
}

func (g *generator) deleteOptions() deleteSpec {
	d := deleteSpec{grace: -1}
	d.propagation = pick(g.rng, weighted[string]{4, ""}, weighted[string]{3, "Orphan"}, weighted[string]{2, "Background"}, weighted[string]{2, "Foreground"})
	if g.chance(0.15) {
		d.orphanDependents = oneOf(g.rng, "true", "false")
	}
	if g.chance(0.3) {
		d.grace = oneOf[int64](g.rng, 0, 1, 30)
	}
	if g.chance(0.35) {
		d.precondition = oneOf(g.rng, "rv", "stale-rv", "uid", "wrong-uid")
	}
	return d
}

// changeFor is a random change for a write over r with verb.
func (g *generator) changeFor(r route, verb string) change {
	switch {
	case r.kind == "Binding":
		return change{name: "bind", value: oneOf(g.rng, "node-a", "node-b")}
	case r.kind == "Eviction":
		return change{name: "evict"}
	case r.sub == "ephemeralcontainers":
		return change{name: "ephemeral-container", value: fmt.Sprintf("debug-%d", g.rng.IntN(1000))}
	case r.sub == "resize":
		return change{name: "resize", value: oneOf(g.rng, "20m", "50m", "100m")}
	case r.sub == "status":
		return pick(g.rng,
			weighted[change]{6, change{name: "status", value: fmt.Sprintf("v%d", g.rng.IntN(1000))}},
			weighted[change]{2, g.metadataChange()},
			weighted[change]{2, g.contentChange(r.parent.Resource)})
	case r.sub != "":
		return g.metadataChange() // a subresource this generator does not know: send the object, relabelled
	}
	if verb == "create" {
		return pick(g.rng,
			weighted[change]{4, change{name: "create-plain"}},
			weighted[change]{3, g.contentChange(r.parent.Resource)},
			weighted[change]{2, change{name: "owner-add", value: oneOf(g.rng, "bait", ownerName)}},
			weighted[change]{1, change{name: "annotation-fencekit", key: "fencing.fencekit.io/epoch", value: "current"}})
	}
	return pick(g.rng, weighted[change]{5, g.metadataChange()}, weighted[change]{5, g.contentChange(r.parent.Resource)})
}

// metadataChange changes labels, annotations (fencekit's keys too), finalizers or owner references.
func (g *generator) metadataChange() change {
	return pick(g.rng,
		weighted[change]{4, change{name: "label-add", key: fmt.Sprintf("team-%d", g.rng.IntN(4)), value: fmt.Sprintf("v%d", g.rng.IntN(100))}},
		weighted[change]{3, change{name: "label-coverage", value: oneOf(g.rng, "", "other")}},
		weighted[change]{3, change{name: "annotation-add", key: "example.com/note", value: fmt.Sprintf("n%d", g.rng.IntN(100))}},
		weighted[change]{5, change{name: "annotation-fencekit",
			key:   oneOf(g.rng, "fencing.fencekit.io/epoch", "fencing.fencekit.io/delete-at-epoch", "fencing.fencekit.io/writer"),
			value: oneOf(g.rng, "current", "stale", "future", "", "remove")}},
		weighted[change]{4, change{name: "finalizer-add", value: oneOf(g.rng, "example.com/hold", "orphan", "foregroundDeletion", "kubernetes")}},
		weighted[change]{2, change{name: "finalizers-many", n: oneOf(g.rng, 16, 17, 40)}},
		weighted[change]{2, change{name: "finalizers-clear"}},
		weighted[change]{3, change{name: "owner-add", value: oneOf(g.rng, "bait", ownerName)}},
		weighted[change]{2, change{name: "owner-remove"}},
	)
}

// contentChange changes what the object holds: data, spec, epoch.
func (g *generator) contentChange(resource string) change {
	v := fmt.Sprintf("attack-%d", g.rng.IntN(10000))
	switch resource {
	case "configmaps":
		return pick(g.rng,
			weighted[change]{5, change{name: "data-set", key: oneOf(g.rng, "v", "seed", "new"), value: v}},
			weighted[change]{2, change{name: "data-remove", key: oneOf(g.rng, "v", "seed")}},
			weighted[change]{1, change{name: "binary-data", key: "b", value: v}},
			weighted[change]{1, change{name: "immutable"}})
	case "fencedresources":
		c := pick(g.rng,
			weighted[change]{5, change{name: "spec-data", key: "v", value: v}},
			weighted[change]{2, change{name: "spec-epoch", value: oneOf(g.rng, "current", "stale", "future", "huge")}},
			weighted[change]{1, change{name: "spec-lease", value: "another-lease"}})
		if c.name == "spec-epoch" && g.n%2 == 1 {
			// Every other epoch change is to spec.raisedEpoch (a declaration's epoch), without drawing
			// from the generator: a seed's other steps stay as they were.
			c.name = "spec-raised-epoch"
		}
		return c
	}
	return pick(g.rng,
		weighted[change]{3, change{name: "pod-deadline", value: fmt.Sprint(60 + g.rng.IntN(600))}},
		weighted[change]{3, change{name: "pod-image", value: oneOf(g.rng, "registry.k8s.io/pause:3.9", "example.com/evil:1")}},
		weighted[change]{2, change{name: "pod-toleration", value: v}})
}

// pad is a managedFields padding of an entry of a world object.
func (g *generator) pad() step {
	kind := pick(g.rng, weighted[string]{5, "configmaps"}, weighted[string]{4, "fencedresources"}, weighted[string]{1, "pods"})
	group := ""
	if kind == "fencedresources" {
		group = "fencing.fencekit.io"
	}
	r := g.routeOf(group, kind, "")
	target := g.targetOf(r)
	if kind == "configmaps" && g.chance(0.6) {
		target = "cm-gitops" // its GitOps entry owns data
	}
	s := step{kind: kPad, route: r, target: target, actor: oneOf(g.rng, actorEditor, actorGitOps, actorOther, actorStale),
		count: g.rng.IntN(49), entry: pick(g.rng, weighted[string]{16, "other"}, weighted[string]{2, "own"}, weighted[string]{2, "epoch"}),
		verb: pick(g.rng, weighted[string]{8, "merge"}, weighted[string]{1, "json"}, weighted[string]{1, "update"})}
	s.manager = pick(g.rng, weighted[managerSpec]{8, managerSpec{kind: "none"}}, weighted[managerSpec]{2, managerSpec{kind: "tool", name: "padder"}})
	return s
}

// binding is a Binding of the world's Pod, over pods/binding or the top-level bindings resource.
func (g *generator) binding() step {
	var rs []route
	for _, r := range g.routes {
		if r.kind == "Binding" {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return g.write()
	}
	r := oneOf(g.rng, rs...)
	s := g.writeOn(r, oneOf(g.rng, pods...))
	s.actor = pick(g.rng, weighted[string]{5, actorEditor}, weighted[string]{2, actorGitOps}, weighted[string]{2, actorOther},
		weighted[string]{2, actorStale}, weighted[string]{3, actorScheduler}, weighted[string]{1, actorKubelet})
	s.manager = g.managerFor(s.actor)
	s.verb = "create"
	return s
}

// loopStep runs loops of free writes during the holder's writes and deletes.
func (g *generator) loopStep() step {
	s := step{kind: kLoop, actor: oneOf(g.rng, actorEditor, actorGitOps), count: 2 + g.rng.IntN(3)}
	switch pick(g.rng, weighted[string]{5, "fr"}, weighted[string]{4, "cm"}, weighted[string]{2, "any"}) {
	case "fr":
		s.route, s.target, s.loop = g.routeOf("fencing.fencekit.io", "fencedresources", ""), scratchFR, oneOf(g.rng, "relabel", "relabel", "annotate")
	case "cm":
		s.route, s.target, s.loop = g.routeOf("", "configmaps", ""), scratchCM, "finalizers"
	default:
		if g.chance(0.5) {
			s.route = g.routeOf("fencing.fencekit.io", "fencedresources", "")
			s.target, s.loop = oneOf(g.rng, fencedResources...), "relabel"
		} else {
			s.route = g.routeOf("", "configmaps", "")
			s.target, s.loop = oneOf(g.rng, configMaps...), "finalizers"
		}
	}
	return s
}

// deletion is a scripted sequence: free finalizers on the owner, perhaps a tokenless orphan or foreground
// finalizer, the holder's delete, perhaps a second DELETE with other options and another write, and the
// deletion's completion.
func (g *generator) deletion() []step {
	cms := g.routeOf("", "configmaps", "")
	var out []step
	if g.chance(0.6) {
		s := g.writeOn(cms, ownerName)
		s.change, s.verb, s.dryRun = change{name: "finalizer-add", value: "example.com/hold"}, oneOf(g.rng, "merge", "apply", "strategic"), false
		out = append(out, s)
	}
	if g.chance(0.35) {
		s := g.writeOn(cms, ownerName)
		s.change, s.verb, s.dryRun = change{name: "finalizer-add", value: oneOf(g.rng, "orphan", "foregroundDeletion")}, oneOf(g.rng, "merge", "json", "update"), false
		out = append(out, s)
	}
	hd := step{kind: kHolderDelete, actor: "holder", route: cms, target: ownerName}
	if g.chance(0.25) {
		hd.policy = oneOf(g.rng, "Background", "Foreground")
	}
	out = append(out, hd)
	if g.chance(0.7) {
		s := g.writeOn(cms, ownerName)
		s.verb, s.dryRun = "delete", false
		s.del = g.deleteOptions()
		s.del.propagation = pick(g.rng, weighted[string]{5, "Orphan"}, weighted[string]{2, "Foreground"}, weighted[string]{2, "Background"}, weighted[string]{1, ""})
		s.del.orphanDependents = ""
		if s.del.propagation == "" {
			s.del.orphanDependents = "true"
		}
		out = append(out, s)
	}
	if g.chance(0.5) {
		out = append(out, g.write())
	}
	return append(out, step{kind: kFinishDelete, actor: "harness", route: cms, target: ownerName})
}
