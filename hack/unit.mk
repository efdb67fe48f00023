##@ Unit tests

# make test runs these with everything else; make test-unit runs them alone, with KUBEBUILDER_ASSETS removed
# from the environment so that a test that reaches for a control plane fails instead of finding one.
.PHONY: test-unit
test-unit: ## Run the unit tests alone: every package whose test build starts no control plane, PostgreSQL or spin (hack/unit-packages.sh lists them).
	pkgs="$$(hack/unit-packages.sh)"; env -u KUBEBUILDER_ASSETS go test -count=1 $$pkgs
