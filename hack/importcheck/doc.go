// Command importcheck fails when fencekit's import rules (docs/design/imports.md) are
// broken, in the build of each package (go list -deps) or in its test build (go list -test -deps), and names
// the import chain that breaks them. make verify runs it from the repository's root:
//
//	go run ./hack/importcheck
//
// The rules are allowlists: a package a rule covers may reach only the fencekit packages the rule names, so
// a new operator package is refused without a change here. Packages outside the module are not checked,
// except where a rule names them (the shipped binaries may not link Go's testing package or envtest).
package main
