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
{{- define "fencekit.certSecretName" -}}{{ include "fencekit.fullname" . }}-webhook-cert{{- end -}}
{{- define "fencekit.webhookConfigName" -}}{{ include "fencekit.fullname" . }}-validating-webhook{{- end -}}
{{- define "fencekit.objectsWebhookConfigName" -}}{{ include "fencekit.fullname" . }}-objects{{- end -}}
{{- define "fencekit.certificateName" -}}{{ include "fencekit.fullname" . }}-webhook{{- end -}}
{{- define "fencekit.certDir" -}}/tmp/k8s-webhook-server/serving-certs{{- end -}}
