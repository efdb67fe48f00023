{{/* The Lease the operator's replicas elect their leader on, in the release namespace: internal/operator.LeaseName. */}}
{{- define "fencekit.electionLeaseName" -}}fencekit-manager{{- end -}}

{{/* The operator's ServiceAccount as the apiserver authenticates it (request.userInfo.username). */}}
{{- define "fencekit.operatorUsername" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "fencekit.serviceAccountName" . }}
{{- end -}}

{{/* The namespaces the FencedResource webhook does not check (release namespace, kube-system, webhook.excludeNamespaces), as a JSON list. */}}
{{- define "fencekit.uncheckedNamespaces" -}}
{{- concat (list .Release.Namespace "kube-system") .Values.webhook.excludeNamespaces | uniq | toJson -}}
{{- end -}}
