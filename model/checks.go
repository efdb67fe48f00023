package model

// Check is one exhaustive spin run of fencekit.pml.
type Check struct {
	// Name names the run in reports and test names.
	Name string
	// About says what the run is, for the report.
	About string
	// Defines are the -D flags (without -D) the model is compiled with.
	Defines []string
	// Refute is true if spin must find a violation: a mutation, or a residual docs/design/residuals.md accepts.
	Refute bool
	// Property is the property a refuting run must violate ("P1" to "P6"); empty: any.
	Property string
	// Full marks a run of `make model-full` only (minutes of its own); Slow one that `make model` runs
	// but test/model's test (make test) leaves out.
	Full, Slow bool
	// MemoryMB, if set, replaces the default bound on pan's state store (MemoryMB).
	MemoryMB int
}

// Bound is the highest epoch an acquisition may issue in every check (MAXE in the model): two terms, so
// that an epoch and a later one exist, and a Lease deleted and created again takes the second.
const Bound = 2

// Checks are the runs, the design's first.
var Checks = []Check{
	{Name: "design", About: "the design: 3 electors that fence on acquire, 2 objects, tokenless actors seeding records",
		Defines: []string{"NO_LEASE_DELETER"}, Slow: true},
	{Name: "design-recreate", About: "the design with a user who deletes the Lease (electors create it again, seeded): 2 electors",
		Defines: []string{"NH=2"}, Slow: true},
	{Name: "design-no-fence", About: "the design with one elector that fences nothing and declares nothing",
		Defines: []string{"CONFIG_B"}},
	{Name: "design-widen", About: "the design with a namespace admin who widens the policy once",
		Defines: []string{"NO_LEASE_DELETER", "WIDEN"}, Full: true, MemoryMB: 14000},
	{Name: "design-deletes", About: "the design with deletes: holder A's deletion marker and DELETE, tokenless deletes once the Lease has no live holder",
		Defines: []string{"DELETES", "NO_LEASE_DELETER", "NO_SEEDS"}, Full: true, MemoryMB: 14000},
	{Name: "a-copy-decides-label-out", About: "mutation (a): the copy decides a write that labels the object out (coverage checked before the write only)",
		Defines: []string{"NO_LEASE_DELETER", "MUT_COPY_LABEL_OUT"}, Refute: true, Property: "P1"},
	{Name: "b-copy-without-declaration", About: "mutation (b): the copy is used without the Lease's fence-on-acquire declaration",
		Defines: []string{"CONFIG_B", "MUT_COPY_NO_DECLARATION"}, Refute: true, Property: "P1"},
	{Name: "c-copy-without-record-check", About: "mutation (c): the copy admits without the stored record being the presented epoch",
		Defines: []string{"NO_LEASE_DELETER", "MUT_COPY_NO_RECORD"}, Refute: true, Property: "P1"},
	{Name: "d-fence-skips-equal-record", About: "mutation (d): fence-on-acquire leaves an object already at the new epoch alone (a raise that writes nothing when the record already equals the new epoch)",
		Defines: []string{"NO_LEASE_DELETER", "WIDEN", "MUT_FENCE_SKIPS_EQUAL"}, Refute: true, Property: "P1"},
	{Name: "e-record-above-refuses", About: "mutation (e): a record rule where a stored record above the presented epoch refuses (and fails a raise)",
		Defines: []string{"NO_LEASE_DELETER", "MUT_TODAY_RECORD_RULE"}, Refute: true, Property: "P3"},
	{Name: "f-delete-without-retry", About: "fencing.NewClient's Delete without its retry: none when a free write lands between the marker and the DELETE",
		Defines: []string{"DELETES", "NO_LEASE_DELETER", "NO_SEEDS", "NO_DELETE_RETRY"}, Refute: true, Property: "P3"},
	{Name: "g-copy-ignores-coverage", About: "mutation (g): the copy decides writes of objects a widened policy covers before an acquisition listed them (the policy's coverage epoch ignored)",
		Defines: []string{"NO_LEASE_DELETER", "WIDEN", "MUT_COPY_IGNORES_COVERAGE"}, Refute: true, Property: "P1"},
	{Name: "design-headroom", About: "the design with sizes: tokenless actors grow covered objects within the bound on the whole object (2 electors)",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "NO_SEEDS", "NO_COPY", "HEADROOM"}, Slow: true},
	{Name: "design-acquire", About: "the design with fence-on-acquire raising every object a holder wrote and at most one declaration per acquisition: tokenless actors create up to 3 declarations (2 electors)",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "ACQ"}, Slow: true},
	{Name: "design-alias", About: "the design with Pods bound through pods/binding and through the alias bindings (2 electors)",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "NO_SEEDS", "ALIAS"}, Slow: true},
	{Name: "h-pad-through-an-entry", About: "mutation (h): the per-entry bound on free writes, which lets an entry that also owns a non-free field grow without limit",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "NO_SEEDS", "NO_COPY", "HEADROOM", "MUT_ENTRY_PAD"}, Refute: true, Property: "P4"},
	{Name: "i-raise-all", About: "mutation (i): every raise of fence-on-acquire must commit within a time bound, or the acquisition fails",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "ACQ", "MUT_RAISE_ALL"}, Refute: true, Property: "P5"},
	{Name: "j-alias-unrouted", About: "mutation (j): the webhook matches only R and R/*: a binding through bindings is not routed to it",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "NO_SEEDS", "ALIAS", "MUT_ALIAS_UNROUTED"}, Refute: true, Property: "P6"},
	{Name: "k-budget-holder-written", About: "mutation (k): the budget also applies to the objects a holder wrote (decision 0033), so one is left unraised and the copy admits the old term's writes to it",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "ACQ", "MUT_BUDGET_HOLDER", "MAXDECL=1"}, Refute: true, Property: "P1"},
	{Name: "residual-late-entry", About: "residual (docs/design/residuals.md, not covered): P1 without its exception for an object that enters the coverage by a write committed after the fence listed",
		Defines: []string{"NO_LEASE_DELETER", "STRICT_ENTRY"}, Refute: true, Property: "P1"},
	{Name: "residual-unraised", About: "the budget's residual (the design): P1 without its exception for a declaration the fence left unraised, until the new holder's first write to it",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "NO_COPY", "ACQ", "STRICT_UNRAISED"}, Refute: true, Property: "P1"},
	{Name: "residual-unraised-copy", About: "the budget's residual on the copy (the design): P1 with only its commit exception for a declaration the fence left unraised; a stale write in flight gives it the old epoch's record, and the lagging copy admits the old term's next write",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "ACQ", "STRICT_UNRAISED_COPY", "MAXDECL=2"}, Refute: true, Property: "P1"},
	{Name: "residual-binding-in-flight", About: "residual (not covered): a binding admitted before an acquisition commits after the new holder's token was handed out (admission runs once, before the Pod's swap)",
		Defines: []string{"NH=2", "NO_LEASE_DELETER", "NO_SEEDS", "NO_COPY", "ALIAS", "STRICT_BIND"}, Refute: true, Property: "P1"},
	{Name: "residual-recreate", About: "residual (docs/design/residuals.md, not covered): the Lease deleted and created again by an elector that declares nothing, the copy lagging",
		Defines: []string{"CONFIG_B", "RESIDUAL_RECREATE"}, Refute: true, Property: "P1", Slow: true},
}
