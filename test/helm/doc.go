// Package helm tests the fencekit Helm chart (charts/fencekit): helm lint, helm template with each toggle,
// the values schema, the chart's copies of config/, a server-side apply of everything to a real local
// apiserver, helm install, upgrade and uninstall (the CRDs' CEL rules included), the RBAC of the operator and
// of the fencekit-elector ClusterRole proven by impersonation, and the Dockerfile's go build. Helm is the
// pinned Go tool of hack/tools, run as a subprocess, so that the main module does not depend on helm.
package helm
