.PHONY: check-binaries
check-binaries: ## Check that the shipped binaries (fencekit, manager, kubectl-fencekit) link no test code, and the fencekit CLI neither the demo nor the operator.
	go run ./hack/binarycheck

verify: check-binaries
