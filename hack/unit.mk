##@ Unit tests

# make test runs these with everything else; make test-unit runs them alone, with KUBEBUILDER_ASSETS removed
# from the environment so that a test that reaches for a control plane fails instead of finding one. The
# packages are listed by folder, every one outside test/: a test beside its code starts no control plane,
# PostgreSQL or spin, and hack/importcheck refuses a test build outside test/ that reaches test/util (but for
# test/util/httpfencetest, an HTTP fence's test server, which starts nothing).
.PHONY: test-unit
test-unit: ## Run the unit tests alone, with no control plane, PostgreSQL or spin: every package outside test/ (the library, the operator's code, the CLIs, the dev commands, the tools).
	env -u KUBEBUILDER_ASSETS go test -count=1 $$(go list ./... | grep -v '^$(shell go list -m)/test/')
