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
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
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
{{- $repository := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}{{ end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The service account of a component: (list ctx "controller"|"webhook"). Its
serviceAccount.name, else the component's own name. */}}
{{- define "holdfast.serviceAccountName" -}}
{{- $ctx := index . 0 -}}{{- $component := index . 1 -}}
{{- $values := index $ctx.Values $component -}}
{{- default (printf "%s-%s" (include "holdfast.fullname" $ctx) $component) $values.serviceAccount.name -}}
{{- end -}}

{{/* timeouts.apiserverRequest as a duration the controller parses: a number of seconds
gets its unit ("60" -> "60s"); "60s" and "1m" are passed as they are. */}}
{{- define "holdfast.apiserverRequestTimeout" -}}
{{- $t := toString .Values.timeouts.apiserverRequest -}}
{{- if regexMatch "^[0-9]+$" $t -}}
{{- printf "%ss" $t -}}
{{- else -}}
{{- $t -}}
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

{{/* The controller identities: this release's controller and identities.extraControllerUsers. */}}
{{- define "holdfast.controllerUsers" -}}
{{- prepend .Values.identities.extraControllerUsers (include "holdfast.saUser" (list . (include "holdfast.serviceAccountName" (list . "controller")))) | toJson -}}
{{- end -}}

{{/* A list of user names as a CEL list of single-quoted strings. */}}
{{- define "holdfast.cel.list" -}}
{{- $out := list -}}
{{- range . -}}
{{- if or (contains "'" .) (contains "\\" .) (contains "\"" .) (contains "," .) (ne . (trim .)) (eq . "") -}}
{{- fail (printf "identities: user name %q may not be empty, contain quotes, backslashes or commas, or start or end with spaces (the webhook reads the list comma-separated and trimmed)" .) -}}
{{- end -}}
{{- $out = append $out (printf "'%s'" .) -}}
{{- end -}}
[{{ join ", " $out }}]
{{- end -}}

{{/* The validation engine (validation.engine): webhook, policy or both. */}}
{{- define "holdfast.engine" -}}
{{- $e := .Values.validation.engine | default "webhook" -}}
{{- if not (has $e (list "webhook" "policy" "both")) -}}
{{- fail (printf "validation.engine: %q is none of webhook, policy, both" $e) -}}
{{- end -}}
{{- $e -}}
{{- end -}}

{{/* CEL: the replicated Job of a JobSet (the variable named by .) has a Job template spec. */}}
{{- define "holdfast.cel.jobTemplateSpec" -}}
(has({{ . }}.template) && has({{ . }}.template.spec))
{{- end -}}

{{/* CEL: the replicated Job of a JobSet (the variable named by .) has podReplacementPolicy:
Failed in its Job template spec. */}}
{{- define "holdfast.cel.replacedOnlyWhenFailed" -}}
({{ include "holdfast.cel.jobTemplateSpec" . }} && has({{ . }}.template.spec.podReplacementPolicy) && {{ . }}.template.spec.podReplacementPolicy == 'Failed')
{{- end -}}

{{/* Whether a resource list (CEL expression) holds no quantity above zero, or is absent
(Kubernetes' CEL quantity library; a resource quantity is never negative). */}}
{{- define "holdfast.cel.zeroes" -}}
(!has({{ . }}) || {{ . }}.all(k, !quantity(string({{ . }}[k])).isGreaterThan(quantity('0'))))
{{- end -}}

{{/* Whether a pod spec (CEL expression; a Workload pod set's template.spec) requests or
limits no non-zero quantity of anything: no container's, init container's or pod-level
request or limit, no overhead, but zeros. A zero request of a resource the ClusterQueue does
not cover gets no flavor either (Kueue skips it), so zeros are sent to the webhook, which
judges by the names the queue covers. */}}
{{- define "holdfast.cel.requestsNothing" -}}
{{- $c := printf "(!has(c.resources) || (%s && %s))" (include "holdfast.cel.zeroes" "c.resources.requests") (include "holdfast.cel.zeroes" "c.resources.limits") -}}
{{ include "holdfast.cel.zeroes" (printf "%s.overhead" .) }} && (!has({{ . }}.resources) || ({{ include "holdfast.cel.zeroes" (printf "%s.resources.requests" .) }} && {{ include "holdfast.cel.zeroes" (printf "%s.resources.limits" .) }})) && (!has({{ . }}.containers) || {{ . }}.containers.all(c, {{ $c }})) && (!has({{ . }}.initContainers) || {{ . }}.initContainers.all(c, {{ $c }}))
{{- end -}}

{{/* A list of user names for a message: sorted, comma-separated, or "none configured". */}}
{{- define "holdfast.describe" -}}
{{- if . }}{{ . | uniq | sortAlpha | join ", " }}{{ else }}none configured{{ end -}}
{{- end -}}

{{/* Whether to render a Prometheus Operator object of kind (index . 2), given its value
(index . 1): true or false as given; auto when the cluster serves
monitoring.coreos.com/v1/<kind> (helm template without --api-versions serves none). */}}
{{- define "holdfast.operatorObject" -}}
{{- $ctx := index . 0 -}}{{- $v := toString (index . 1) -}}{{- $kind := index . 2 -}}
{{- if eq $v "auto" -}}
{{- if $ctx.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind) }}true{{ end -}}
{{- else if eq $v "true" -}}
true
{{- else if ne $v "false" -}}
{{- fail (printf "the %s value enabled: %q is none of true, false, auto" $kind $v) -}}
{{- end -}}
{{- end -}}

{{/* The label matchers every alert's series are selected with (metrics.prometheusRule.selector,
templated; the release namespace by default). */}}
{{- define "holdfast.alertSelector" -}}
{{- with .Values.metrics.prometheusRule.selector -}}
{{- tpl . $ -}}
{{- else -}}
namespace="{{ .Release.Namespace }}"
{{- end -}}
{{- end -}}

{{/* A duration in holdfast's format (a whole number and a unit, ms s m h d, several run
together: 14d, 1h30m) as whole seconds, for PromQL. */}}
{{- define "holdfast.seconds" -}}
{{- $s := toString . -}}
{{- if not (regexMatch "^([0-9]+(ms|s|m|h|d))+$" $s) -}}
{{- fail (printf "%q is not a duration such as 30s, 15m, 24h or 14d" $s) -}}
{{- end -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d)" $s -1 -}}
{{- $n := regexFind "^[0-9]+" . | atoi -}}
{{- $unit := regexReplaceAll "^[0-9]+" . "" -}}
{{- $per := dict "ms" 0 "s" 1 "m" 60 "h" 3600 "d" 86400 -}}
{{- if eq $unit "ms" -}}
{{- $total = add $total (div $n 1000) -}}
{{- else -}}
{{- $total = add $total (mul $n (get $per $unit)) -}}
{{- end -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
The controller's --multikueue-worker list: NAME=PATH of each kueue.multikueue.workers entry,
comma-separated, each kubeconfig mounted at /etc/holdfast/multikueue/NAME/kubeconfig.
*/}}
{{- define "holdfast.multikueueWorkers" -}}
{{- $out := list -}}
{{- range .Values.kueue.multikueue.workers -}}
{{- $out = append $out (printf "%s=/etc/holdfast/multikueue/%s/kubeconfig" .name .name) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}
