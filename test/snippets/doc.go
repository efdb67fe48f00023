// Package snippets checks that what a user copies from fencekit builds where the user pastes it: every Go
// block of README.md, docs/*.md and docs/design/*.md, and the directories examples/worker and
// examples/controller as they are, are compiled in a fresh module outside the repository that requires
// github.com/fencekit/fencekit and replaces it with this checkout, as a user's module does before fencekit
// is published. That module is a copy of test/consumer, whose go.mod is such a module's; its module graph
// is bounded here too (consumer_test.go).
//
// # How a Go block is marked
//
// A ```go block that is a whole file (it starts with a package clause, after comments) is built as it is,
// in a directory of its own. Any other ```go block needs an HTML comment right before it, which the
// rendered page does not show:
//
//	<!-- snippet: not compiled: REASON -->
//
// leaves the block out and says why (the reason must not be empty), and
//
//	<!-- snippet: fragment, compiled in:
//	func run(ctx context.Context, cfg *rest.Config) error {
//		...
//		return nil
//	}
//	-->
//
// builds the block inside the Go declarations that follow "compiled in:", in place of their line "...":
// the frame declares what the fragment assumes (its variables, with their types, and the functions and
// types it calls). The frame and the block are written without imports: each package name they use
// (ctrl, elector, fencing, client, ...) is imported from the table in source.go, unless the block or the
// frame declares that name itself. A marker before anything but a ```go block is an error, as is a
// fragment without a marker.
//
// A block that does not build fails the test with its file and line and the compiler's messages, which
// name the Markdown file and line of each error (the generated files carry //line directives).
//
// # Shell blocks
//
// Every ```sh block of the same files and of the chart's README says how it is checked, in a marker right
// before it: "runs in the clone" or "runs in your module" (TestShellBlocks runs it, with bash -e, in a
// copy of the checkout or in a new module beside that copy), "needs a cluster", or "not run: REASON".
package snippets
