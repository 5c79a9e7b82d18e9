{{/* Names. */}}
{{- define "holdfast.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "holdfast.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "holdfast.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "holdfast.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "holdfast.controller.name" -}}{{ include "holdfast.fullname" . }}-controller{{- end -}}
{{- define "holdfast.webhook.name" -}}{{ include "holdfast.fullname" . }}-webhook{{- end -}}
{{- define "holdfast.caSecret" -}}{{ include "holdfast.fullname" . }}-ca{{- end -}}
{{- define "holdfast.leaseName" -}}{{ include "holdfast.fullname" . }}-controller{{- end -}}
{{- define "holdfast.webhookConfigName" -}}{{ include "holdfast.fullname" . }}{{- end -}}

{{/* The Secret the webhook serves from. */}}
{{- define "holdfast.webhook.tlsSecret" -}}
{{- if eq .Values.certs.mode "secret" -}}
{{- .Values.certs.secret.webhookSecretName -}}
{{- else -}}
{{- include "holdfast.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* The Secret the hold API serves from. */}}
{{- define "holdfast.controller.tlsSecret" -}}
{{- if eq .Values.certs.mode "secret" -}}
{{- default .Values.certs.secret.webhookSecretName .Values.certs.secret.controllerSecretName -}}
{{- else -}}
{{- include "holdfast.fullname" . }}-controller-tls
{{- end -}}
{{- end -}}

{{/* A Service's DNS names, short to fully qualified: (list ctx serviceName). */}}
{{- define "holdfast.dnsNames" -}}
{{- $ctx := index . 0 -}}{{- $svc := index . 1 -}}{{- $ns := $ctx.Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $ctx.Values.clusterDomain) | join "," -}}
{{- end -}}

{{/* Labels. */}}
{{- define "holdfast.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "holdfast.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: holdfast
{{- end -}}

{{/* Selector labels of a component: (list ctx "controller"|"webhook"). */}}
{{- define "holdfast.selectorLabels" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "holdfast.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "holdfast.componentLabels" -}}
{{ include "holdfast.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "holdfast.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* timeouts.apiserverRequest in whole seconds (accepts 60, "60", "60s", "1m"). */}}
{{- define "holdfast.apiserverRequestSeconds" -}}
{{- $t := toString .Values.timeouts.apiserverRequest -}}
{{- if hasSuffix "m" $t -}}
{{- mul (trimSuffix "m" $t | atoi) 60 -}}
{{- else -}}
{{- trimSuffix "s" $t | atoi -}}
{{- end -}}
{{- end -}}

{{/* User name of a service account of this release. */}}
{{- define "holdfast.saUser" -}}
{{- printf "system:serviceaccount:%s:%s" (index . 0).Release.Namespace (index . 1) -}}
{{- end -}}

{{/* The namespaces no webhook sees. */}}
{{- define "holdfast.excludedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace -}}
{{- range .Values.webhook.excludeNamespaces }}{{- $ns = append $ns . -}}{{- end -}}
{{- $ns | uniq | toJson -}}
{{- end -}}

{{/* Pod anti-affinity (or the user's affinity): (list ctx component values). */}}
{{- define "holdfast.affinity" -}}
{{- $ctx := index . 0 -}}{{- $component := index . 1 -}}{{- $v := index . 2 -}}
{{- if $v.affinity -}}
{{- toYaml $v.affinity -}}
{{- else if eq $v.antiAffinity "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "holdfast.selectorLabels" (list $ctx $component) | nindent 10 }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "holdfast.selectorLabels" (list $ctx $component) | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* Fields common to every webhook: (dict "common" "excluded" "service" "path" "caBundle"). */}}
{{- define "holdfast.webhookCommon" -}}
admissionReviewVersions: ["v1"]
failurePolicy: {{ .common.failurePolicy }}
matchPolicy: Equivalent
sideEffects: None
timeoutSeconds: {{ .common.timeoutSeconds }}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values: {{ .excluded }}
clientConfig:
  service:
    namespace: {{ .service.namespace }}
    name: {{ .service.name }}
    port: {{ .service.port }}
    path: {{ .path }}
  {{- with .caBundle }}
  caBundle: {{ . }}
  {{- end }}
{{- end -}}

{{/* runtimes.extra as the binaries' --extra-runtime-resources: group/plural, comma-separated. */}}
{{- define "holdfast.extraRuntimeResources" -}}
{{- $out := list -}}
{{- range .Values.runtimes.extra -}}
{{- $group := .apiGroup -}}
{{- range .resources -}}
{{- $out = append $out (printf "%s/%s" $group .) -}}
{{- end -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}
