# The Helm chart's targets (included by the Makefile). Helm is the Go tool pinned in hack/tools/go.mod.

CHART := charts/fencekit
# helm template needs a Kubernetes version to check the chart's kubeVersion against (the pinned helm assumes
# v1.20 otherwise); this is the local control plane's.
CHART_KUBE_VERSION ?= v1.37.2

##@ Helm chart

# The CRDs (files/crds/) are copied by manifests itself, so that a regenerated CRD never leaves the chart behind.
.PHONY: chart
chart: manifests ## Refresh the chart's copies of config/ (CRDs, webhook, Lease policy, elector role) and its README.
	cp config/webhook/manifests.yaml $(CHART)/files/webhook.yaml
	cp config/policy/lease_policy.yaml $(CHART)/files/lease_policy.yaml
	cp config/rbac/elector_role.yaml $(CHART)/files/elector_role.yaml
	go run ./hack/chartdoc $(CHART)

# make verify regenerates the chart too, so that its git diff catches a chart out of step with config/.
verify: chart

.PHONY: helm-lint
helm-lint: ## Lint the chart (strict).
	$(HELM) lint --strict $(CHART) --namespace fencekit-system --kube-version $(CHART_KUBE_VERSION)

.PHONY: helm-template
helm-template: ## Print the chart rendered with default values (release fencekit in fencekit-system).
	$(HELM) template fencekit $(CHART) --namespace fencekit-system --kube-version $(CHART_KUBE_VERSION)

.PHONY: helm-test
helm-test: control-plane ## Run the chart's tests: lint, templates, schema, apply and RBAC on the local control plane.
	KUBEBUILDER_ASSETS="$$(hack/control-plane.sh --path)" go test -count=1 ./test/helm/...

.PHONY: image-build-check
image-build-check: ## Run the Dockerfile's go build command (as parsed from the Dockerfile) without a container engine.
	go test -count=1 -run 'TestDockerfileBuild' ./test/helm/
