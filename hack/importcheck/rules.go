package main

import "slices"

// A rule says which of the module's packages a set of packages may reach, in their build or, when Tests
// is set, in their test build. Patterns are relative to the module: "pkg/elector" is that
// package alone, "pkg/..." is pkg and every package under it.
type rule struct {
	// Subjects are the packages the rule covers.
	Subjects []string
	// Tests makes the rule cover the subjects' test builds (in-package and external tests) instead of
	// their builds.
	Tests bool
	// May are the packages the subjects may reach, directly or not; any other of the module's packages is
	// refused.
	May []string
	// Never are packages outside the module ("sigs.k8s.io/controller-runtime/...") the subjects may not
	// reach, directly or through other modules.
	Never []string
	// Why is the reason, printed with a breach.
	Why string
}

// controlPlane are the test helpers that start a control plane with fencekit's CRDs and policies but not
// its operator (internal/procfs reads /proc for them; internal/dev/devcluster is the dev cluster they share with make demo;
// test/util/httpfencetest is what httpfence's tests in the package and on PostgreSQL share), what the tests of the public packages may use.
var controlPlane = []string{"test/util/testenv", "internal/dev/devcluster", "internal/scheme", "test/util/pgtest", "internal/dev/postgres", "internal/procfs", "test/util/httpfencetest", "test/util/netproxy"}

// testCode are the packages outside the module that no shipped binary may link: Go's testing package and
// controller-runtime's envtest (which starts kube-apiserver and etcd).
var testCode = []string{"testing", "sigs.k8s.io/controller-runtime/pkg/envtest"}

// outsideTest are the module's packages outside test/: the code, its tools and its examples.
var outsideTest = []string{"api/...", "cmd/...", "controllers/...", "examples/...", "hack/...", "internal/...", "model/...", "pkg/..."}

// shared are the module's packages every binary may use.
var shared = []string{"api/...", "pkg/...", "internal/scheme", "internal/version", "internal/procfs"}

// rules are the import rules of docs/design/imports.md.
var rules = []rule{
	{
		Subjects: []string{"pkg/protocol"},
		May:      []string{"pkg/protocol"},
		Why:      "pkg/protocol is the wire contract every other package reads and writes: it imports nothing of fencekit",
	},
	{
		Subjects: []string{"api/..."},
		May:      []string{"api/...", "pkg/protocol"},
		Why:      "api/v1alpha1 is the API: it imports nothing of fencekit but the wire contract",
	},
	{
		Subjects: []string{"pkg/elector"},
		May:      []string{"pkg/elector", "pkg/protocol", "pkg/internal/seal"},
		Why: "pkg/elector is generic (Leases, epochs, deadlines): it knows nothing of FencedResource or pkg/fencing " +
			"(pkg/internal/seal only lets pkg/fencing build the AcquireFences that declare what they raise)",
	},
	{
		Subjects: []string{"pkg/elector"},
		May:      []string{"pkg/elector", "pkg/protocol", "pkg/internal/seal"},
		Never:    []string{"sigs.k8s.io/controller-runtime/..."},
		Why:      "a client-go program embeds pkg/elector without linking controller-runtime (package managed is the bridge)",
	},
	{
		Subjects: []string{"pkg/fencing/..."},
		May:      []string{"api/...", "pkg/protocol", "pkg/elector", "pkg/fencing/...", "pkg/internal/..."},
		Why: "pkg/ is layered, each room reaching only the rooms below it: pkg/protocol, pkg/elector, " +
			"pkg/fencing (and its sqlfence and httpfence), pkg/managed (controller-runtime's side); no import climbs back up",
	},
	{
		Subjects: []string{"pkg/..."},
		May:      []string{"api/...", "pkg/..."},
		Why:      "a user who embeds pkg/ pulls in pkg/ and api/ only, never the operator or internal/",
	},
	{
		Subjects: []string{"api/...", "pkg/...", "test/integration/..."},
		Tests:    true,
		May:      append([]string{"api/...", "pkg/..."}, controlPlane...),
		Why: "the public packages' tests (their pure tests in the package, those on a control plane or PostgreSQL in " +
			"test/integration) use a control plane with the CRDs and policies (test/util/testenv), " +
			"never the operator's code: tests that need the running operator live on its side " +
			"(test/admission, test/operator, test/controllers, test/cli/plugin)",
	},
	{
		Subjects: outsideTest,
		Tests:    true,
		May:      slices.Concat(outsideTest, []string{"test/util/httpfencetest"}),
		Why: "a test beside its code starts no control plane: tests that need one (or PostgreSQL) live under test/, " +
			"and only they use its helpers (test/util), but for test/util/httpfencetest, which starts nothing",
	},
	{
		Subjects: []string{"examples/..."},
		May:      []string{"api/...", "pkg/..."},
		Why: "a user copies an example out of the repository into a module of their own, where only the " +
			"public packages can be imported (test/snippets builds such a copy)",
	},
	{
		Subjects: []string{"cmd/...", "controllers", "internal/..."},
		May:      []string{"api/...", "pkg/...", "controllers", "internal/..."},
		Why: "the shipped and development binaries link no test helper: test infrastructure lives under test/ " +
			"(test/util), and only tests import it",
	},
	{
		Subjects: []string{"cmd/manager"},
		May:      append([]string{"internal/operator/...", "controllers"}, shared...),
		Never:    testCode,
		Why:      "the operator's binary links the operator (its startup, webhooks and reconcilers) and the library, no test code",
	},
	{
		Subjects: []string{"controllers"},
		May:      append([]string{"controllers", "internal/operator/admission"}, shared...),
		Never:    testCode,
		Why: "the operator's reconcilers use the API, the library and the admission decision; the operator's " +
			"startup and webhooks use them, not the other way round",
	},
	{
		Subjects: []string{"cmd/fencekit"},
		May:      append([]string{"internal/cli/..."}, shared...),
		Never:    testCode,
		Why: "users copy the fencekit CLI into their images: it links its own features and the library, " +
			"neither test code nor the demo, the dev cluster or the operator",
	},
	{
		Subjects: []string{"cmd/kubectl-fencekit"},
		May:      append([]string{"internal/cli/...", "internal/operator/..."}, shared...),
		Never:    testCode,
		Why: "the kubectl plugin links the admission decision to explain refusals, never test code, the demo " +
			"or the dev cluster",
	},
	{
		Subjects: controlPlane,
		May:      append([]string{"api/...", "pkg/..."}, controlPlane...),
		Why:      "the control-plane test helpers serve the public packages' tests: they never start the operator",
	},
}
