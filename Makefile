# fencekit Makefile: the contract for building, testing and running fencekit.
# Tools are pinned as Go tools in hack/tools/go.mod; the control plane (kube-apiserver, etcd) is built from the
# Go module proxy by hack/control-plane.sh and cached outside the repository.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

TOOLS := go tool -modfile=$(CURDIR)/hack/tools/go.mod
CONTROLLER_GEN := $(TOOLS) controller-gen
HELM := $(TOOLS) helm
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
IMG ?= ghcr.io/fencekit/fencekit:$(VERSION)
LDFLAGS := -X github.com/fencekit/fencekit/internal/version.Version=$(VERSION) -X github.com/fencekit/fencekit/internal/version.Commit=$(COMMIT)
TEST_TIMEOUT ?= 40m

.PHONY: all
all: build

# Further targets (the Helm chart's) live in hack/*.mk.
include $(wildcard hack/*.mk)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-20s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: ## Generate DeepCopy methods for the API types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: manifests
manifests: ## Generate the CRD, RBAC and webhook manifests (config/ and the Helm chart's files/crds/).
	$(CONTROLLER_GEN) rbac:roleName=fencekit-manager crd webhook paths="./..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac output:webhook:artifacts:config=config/webhook
	@mkdir -p charts/fencekit/files/crds && rm -f charts/fencekit/files/crds/*.yaml && cp config/crd/bases/*.yaml charts/fencekit/files/crds/

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: ## Run golangci-lint (pinned in hack/tools/go.mod) with the linters of .golangci.yml on every package and its tests.
	$(TOOLS) golangci-lint run ./...

.PHONY: importcheck
importcheck: ## Check the import rules of docs/design/imports.md on every package's build and test build (go list -deps, -test -deps).
	go run ./hack/importcheck

.PHONY: verify
verify: generate manifests lint importcheck ## Regenerate everything, lint, check the import rules; fail if the tree changed.
	@test -z "$$(gofmt -s -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -s -l $$(git ls-files '*.go'); exit 1; }
	@git diff --exit-code -- api config charts || { echo "generated files are out of date: run 'make generate manifests' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api config charts)" || { echo "untracked generated files:"; git status --porcelain -- api config charts; exit 1; }

.PHONY: control-plane
control-plane: ## Build (once) kube-apiserver, kube-controller-manager and etcd from the Go module proxy into the cache.
	hack/control-plane.sh

# make demo and make run start no kube-controller-manager: they build the rest of the control plane only.
.PHONY: control-plane-apiserver
control-plane-apiserver: ## Build (once) kube-apiserver and etcd only, what make demo and make run start.
	hack/control-plane.sh --no-controller-manager

# A KUBEBUILDER_ASSETS set by the caller (environment or make variable) is used as is; otherwise the control
# plane is built (once) by hack/control-plane.sh and its cache used. test/admission is the longest package by
# far and mostly waits on its control plane: the tests ADMISSION_SHARD selects run in a second go test, on a
# control plane of their own, beside the first; go test starts packages in the order given, so the rest of
# test/admission goes first and the other packages run beside it. The shard's output follows the first's.
ADMISSION_SHARD ?= ^TestRound([4-7]|1[4-9])
.PHONY: test
test: $(if $(KUBEBUILDER_ASSETS),,control-plane) vet ## Run every test (unit, envtest integration, e2e) on the local control plane (or on a preset KUBEBUILDER_ASSETS).
	@assets="$(or $(KUBEBUILDER_ASSETS),$$(hack/control-plane.sh --path))"; shard_log="$$(mktemp)"; \
	echo "go test -count=1 -timeout $(TEST_TIMEOUT) -run '$(ADMISSION_SHARD)' ./test/admission (beside the rest)"; \
	KUBEBUILDER_ASSETS="$$assets" go test -count=1 -timeout $(TEST_TIMEOUT) -run '$(ADMISSION_SHARD)' ./test/admission >"$$shard_log" 2>&1 & shard=$$!; \
	echo "go test -count=1 -timeout $(TEST_TIMEOUT) -skip '$(ADMISSION_SHARD)' ./test/admission ./..."; \
	rest=0; KUBEBUILDER_ASSETS="$$assets" go test -count=1 -timeout $(TEST_TIMEOUT) -skip '$(ADMISSION_SHARD)' \
		./test/admission $$(go list ./... | grep -vx '$(shell go list -m)/test/admission') || rest=$$?; \
	sharded=0; wait $$shard || sharded=$$?; cat "$$shard_log"; rm -f "$$shard_log"; \
	echo "make test: the rest exited $$rest, the test/admission shard $$sharded"; \
	test $$rest -eq 0 && test $$sharded -eq 0

# The lowest Kubernetes fencekit supports (docs/design/kubernetes-versions.md): its
# kube-apiserver is built from the Go module proxy like the default one, once, into its own cache directory.
COMPAT_K8S_VERSION ?= 1.35.4

.PHONY: test-compat
test-compat: ## Run every test against the lowest supported Kubernetes (COMPAT_K8S_VERSION: kube-apiserver and kube-controller-manager, built on first use: 15-30 min).
	FENCEKIT_K8S_VERSION=$(COMPAT_K8S_VERSION) hack/control-plane.sh >/dev/null
	KUBEBUILDER_ASSETS="$$(FENCEKIT_K8S_VERSION=$(COMPAT_K8S_VERSION) hack/control-plane.sh --path)" go test -count=1 -timeout $(TEST_TIMEOUT) ./...

BENCH ?= .
BENCH_PKGS ?= ./test/bench/...
BENCH_RESULTS ?= test/bench/results

.PHONY: bench
bench: control-plane ## Run the benchmarks (BENCH=regexp, BENCH_PKGS=packages); record them in test/bench/results and compare with the previous run.
	KUBEBUILDER_ASSETS="$$(hack/control-plane.sh --path)" go test -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 90m $(BENCH_PKGS) \
		| go run ./test/bench/record -dir $(BENCH_RESULTS)

.PHONY: bench-write
bench-write: ## Run only the fenced write benchmarks (their ratios to the same unfenced ConfigMap write: a fenced ConfigMap, a FencedResource), recorded as by bench.
	$(MAKE) bench BENCH='BenchmarkFencedWrite$$$$|BenchmarkObjectWrite$$$$' BENCH_PKGS='./test/bench/fencing/ ./test/bench/objects/'

.PHONY: bench-scale
bench-scale: ## Run only the scale sweep: the control plane's CPU and memory, the replicas' and the operator's memory for 100 and 1,000 Leases x 2-3 replicas (and 1,000 with clients limited to the renewal rate) and 100-10,000 FencedResources; the Lease points three times, alternating (about 40 min).
	$(MAKE) bench BENCH='BenchmarkControlPlaneCost$$$$' BENCH_PKGS=./test/bench/fencing/

CHAOS_SEEDS ?= 2
CHAOS_DURATION ?= 20s
CHAOS_SEED ?= 0
CHAOS_ARGS ?=

.PHONY: chaos
chaos: control-plane ## Fault injection: every fault, fenced and the unfenced control, CHAOS_SEEDS seeds x CHAOS_DURATION per run (about 20 min on 2 cores); CHAOS_SEED=N replays.
	KUBEBUILDER_ASSETS="$$(hack/control-plane.sh --path)" go test -count=1 -timeout 0 -run '^TestChaos$$' -v ./test/chaos \
		-args -chaos.suite=full -chaos.seeds=$(CHAOS_SEEDS) -chaos.duration=$(CHAOS_DURATION) -chaos.seed=$(CHAOS_SEED) $(CHAOS_ARGS)

##@ Build

.PHONY: build
build: ## Build the manager, the fencekit CLI and the kubectl plugin (kubectl-fencekit) into bin/.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/manager ./cmd/manager
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/fencekit ./cmd/fencekit
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/kubectl-fencekit ./cmd/kubectl-fencekit

.PHONY: run
run: control-plane-apiserver ## Start the local control plane, install the CRDs and admission (config/, as committed), run the manager against it.
	@echo "run: building bin/manager and bin/fencekit-dev (the first build on a machine takes a few minutes)"
	@CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/manager ./cmd/manager
	@CGO_ENABLED=0 go build -trimpath -o bin/fencekit-dev ./cmd/fencekit-dev
	@bin/fencekit-dev devcluster --manager bin/manager

.PHONY: demo
demo: control-plane-apiserver ## The paused lock holder, fenced and unfenced, on a local control plane (DEMO_ARGS=--quick for short timings).
	go run ./cmd/fencekit-dev demo $(DEMO_ARGS)

.PHONY: docker-build
docker-build: ## Build the operator image (needs a container engine; CI runs the same go build without one).
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMG) .
