{{/* The chart name, overridable. */}}
{{- define "fencekit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The base of every object name: the release name if it contains the chart name, else <release>-<chart>. */}}
{{- define "fencekit.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fencekit.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fencekit.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fencekit
{{- end -}}

{{- define "fencekit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fencekit.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "fencekit.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (printf "%s-manager" (include "fencekit.fullname" .)) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "fencekit.managerName" -}}{{ include "fencekit.fullname" . }}-manager{{- end -}}
{{- define "fencekit.webhookServiceName" -}}{{ include "fencekit.fullname" . }}-webhook{{- end -}}
{{- define "fencekit.metricsServiceName" -}}{{ include "fencekit.fullname" . }}-metrics{{- end -}}
{{- /* Two names, so that switching certManager.enabled never makes Helm take over (or delete) the Secret
the other mode wrote: cert-manager's is of type kubernetes.io/tls and not Helm's; the operator's is Helm's. */}}
{{- define "fencekit.certSecretName" -}}
{{- if .Values.certManager.enabled -}}{{ include "fencekit.fullname" . }}-webhook-tls{{- else -}}{{ include "fencekit.fullname" . }}-webhook-cert{{- end -}}
{{- end -}}
{{- define "fencekit.webhookConfigName" -}}{{ include "fencekit.fullname" . }}-validating-webhook{{- end -}}
{{- define "fencekit.objectsWebhookConfigName" -}}{{ include "fencekit.fullname" . }}-objects{{- end -}}
{{- define "fencekit.certificateName" -}}{{ include "fencekit.fullname" . }}-webhook{{- end -}}
{{- define "fencekit.certDir" -}}/tmp/k8s-webhook-server/serving-certs{{- end -}}

{{- /* Cluster-scoped names are derived from the release, so that two releases never clash; a release named
fencekit keeps the names config/ uses. */}}
{{- define "fencekit.electorRoleName" -}}{{ include "fencekit.fullname" . }}-elector{{- end -}}
{{- define "fencekit.leasePolicyName" -}}{{ include "fencekit.fullname" . }}-fenced-leases{{- end -}}
{{- define "fencekit.uncheckedPolicyName" -}}{{ include "fencekit.fullname" . }}-unchecked-namespaces{{- end -}}
{{- define "fencekit.metricsAuthName" -}}{{ include "fencekit.fullname" . }}-metrics-auth{{- end -}}
{{- define "fencekit.metricsReaderName" -}}{{ include "fencekit.fullname" . }}-metrics-reader{{- end -}}
{{- define "fencekit.selftestName" -}}{{ include "fencekit.fullname" . }}-selftest{{- end -}}
{{- define "fencekit.metricsCertDir" -}}/tmp/k8s-metrics-server/metrics-certs{{- end -}}

{{- /* The operator image: by digest when image.digest is set, else by tag (default: the chart's appVersion). */}}
{{- define "fencekit.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- /*
A verbatim copy of a config/ manifest (files/, refreshed by `make chart`) under a release-derived name and
with the chart's labels: (list $ "files/x.yaml" "config-name" "release-name"). It renames metadata.name and a
binding's policyName, and fails if the copy no longer has that name (config/ changed: update the chart).
*/}}
{{- define "fencekit.renamedCopy" -}}
{{- $ctx := index . 0 -}}
{{- $file := index . 1 -}}
{{- $from := index . 2 -}}
{{- $to := index . 3 -}}
{{- $src := $ctx.Files.Get $file -}}
{{- $meta := printf "\nmetadata:\n  name: %s\n" $from -}}
{{- if not (contains $meta $src) -}}
{{- fail (printf "%s has no metadata.name %s: run make chart, or update the chart to config/" $file $from) -}}
{{- end -}}
{{- $named := printf "\nmetadata:\n  name: %s\n  labels:\n%s\n" $to (include "fencekit.labels" $ctx | indent 4) -}}
{{- $src | replace $meta $named | replace (printf "policyName: %s\n" $from) (printf "policyName: %s\n" $to) -}}
{{- end -}}

{{- /*
The namespace of the helm test hook, empty when the hook is not rendered: tests.namespace, or "default"
when unset and checked by the webhook. An explicit tests.namespace the webhook skips fails the render.
*/}}
{{- define "fencekit.selftestNamespace" -}}
{{- if and .Values.tests.enabled .Values.rbac.createElectorRole .Values.leasePolicy -}}
{{- $excluded := concat (list .Release.Namespace "kube-system") .Values.webhook.excludeNamespaces -}}
{{- if .Values.tests.namespace -}}
{{- if has .Values.tests.namespace $excluded -}}
{{- fail (printf "tests.namespace %s is not checked by the webhook (it skips %s): choose another namespace for the helm test" .Values.tests.namespace (join ", " $excluded)) -}}
{{- end -}}
{{- .Values.tests.namespace -}}
{{- else if not (has "default" $excluded) -}}
default
{{- end -}}
{{- end -}}
{{- end -}}
