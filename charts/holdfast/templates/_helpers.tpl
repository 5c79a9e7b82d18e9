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

{{/* CEL: the object named by . (object or oldObject) carries holdfast state: an annotation,
label or finalizer whose key starts with holdfast.dev/. */}}
{{- define "holdfast.cel.carries" -}}
({{ . }} != null && ((has({{ . }}.metadata.annotations) && {{ . }}.metadata.annotations.exists(k, k.startsWith('holdfast.dev/'))) || (has({{ . }}.metadata.labels) && {{ . }}.metadata.labels.exists(k, k.startsWith('holdfast.dev/'))) || (has({{ . }}.metadata.finalizers) && {{ . }}.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/')))))
{{- end -}}

{{/* CEL: an UPDATE adds, removes or changes a holdfast.dev/ key of metadata.{.} (a map). */}}
{{- define "holdfast.cel.mapChanges" -}}
(has(oldObject.metadata.{{ . }}) && oldObject.metadata.{{ . }}.exists(k, k.startsWith('holdfast.dev/') && !(has(object.metadata.{{ . }}) && k in object.metadata.{{ . }} && object.metadata.{{ . }}[k] == oldObject.metadata.{{ . }}[k]))) || (has(object.metadata.{{ . }}) && object.metadata.{{ . }}.exists(k, k.startsWith('holdfast.dev/') && !(has(oldObject.metadata.{{ . }}) && k in oldObject.metadata.{{ . }})))
{{- end -}}

{{/* CEL: the request adds, removes or changes holdfast state (a CREATE: carries any). */}}
{{- define "holdfast.cel.stateChanges" -}}
(oldObject == null ? {{ include "holdfast.cel.carries" "object" }} : (object == null ? {{ include "holdfast.cel.carries" "oldObject" }} : ({{ include "holdfast.cel.mapChanges" "annotations" }} || {{ include "holdfast.cel.mapChanges" "labels" }} || (has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/') && !(has(object.metadata.finalizers) && f in object.metadata.finalizers))) || (has(object.metadata.finalizers) && object.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/') && !(has(oldObject.metadata.finalizers) && f in oldObject.metadata.finalizers))))))
{{- end -}}

{{/* CEL: an UPDATE adds, removes or changes key (index . 1) of metadata.(index . 0). */}}
{{- define "holdfast.cel.keyChanges" -}}
{{- $f := index . 0 -}}{{- $k := index . 1 -}}
((has(object.metadata.{{ $f }}) && '{{ $k }}' in object.metadata.{{ $f }}) != (has(oldObject.metadata.{{ $f }}) && '{{ $k }}' in oldObject.metadata.{{ $f }}) || (has(object.metadata.{{ $f }}) && '{{ $k }}' in object.metadata.{{ $f }} && object.metadata.{{ $f }}['{{ $k }}'] != oldObject.metadata.{{ $f }}['{{ $k }}']))
{{- end -}}

{{/* CEL: the object named by . is suspended (spec.suspend: true; absent = false). */}}
{{- define "holdfast.cel.suspended" -}}
(has({{ . }}.spec) && has({{ . }}.spec.suspend) && {{ . }}.spec.suspend == true)
{{- end -}}

{{/* The validation engine (validation.engine): webhook, policy or both. */}}
{{- define "holdfast.engine" -}}
{{- $e := .Values.validation.engine | default "webhook" -}}
{{- if not (has $e (list "webhook" "policy" "both")) -}}
{{- fail (printf "validation.engine: %q is none of webhook, policy, both" $e) -}}
{{- end -}}
{{- $e -}}
{{- end -}}

{{/* CEL: the object named by . carries label key (index . 1) with value (index . 2). */}}
{{- define "holdfast.cel.labelIs" -}}
{{- $o := index . 0 -}}{{- $k := index . 1 -}}{{- $v := index . 2 -}}
(has({{ $o }}.metadata.labels) && '{{ $k }}' in {{ $o }}.metadata.labels && {{ $o }}.metadata.labels['{{ $k }}'] == '{{ $v }}')
{{- end -}}

{{/* CEL: the object named by . carries annotation key (index . 1). */}}
{{- define "holdfast.cel.hasAnnotation" -}}
(has({{ index . 0 }}.metadata.annotations) && '{{ index . 1 }}' in {{ index . 0 }}.metadata.annotations)
{{- end -}}

{{/* CEL: the object named by . is labelled holdfast.dev/managed=true. */}}
{{- define "holdfast.cel.managed" -}}
{{ include "holdfast.cel.labelIs" (list . "holdfast.dev/managed" "true") }}
{{- end -}}

{{/* CEL: the queue the object named by . is in: its non-empty queue-name label, or ''. */}}
{{- define "holdfast.cel.queue" -}}
((has({{ . }}.metadata.labels) && 'kueue.x-k8s.io/queue-name' in {{ . }}.metadata.labels) ? {{ . }}.metadata.labels['kueue.x-k8s.io/queue-name'] : '')
{{- end -}}

{{/* CEL: an annotation key (the variable named by .) only the controller writes. */}}
{{- define "holdfast.cel.controllerAnnotation" -}}
({{ . }}.startsWith('holdfast.dev/hold-') || {{ . }} == 'holdfast.dev/opened' || {{ . }} == 'holdfast.dev/attempt' || {{ . }} == 'holdfast.dev/admitted-runtime-resource-version')
{{- end -}}

{{/* CEL: field (a path below object and oldObject, a map) is the same in both; absent and
empty are the same (the apiserver omits empty maps). */}}
{{- define "holdfast.cel.sameMap" -}}
((has(object.{{ . }}) ? object.{{ . }}.size() : 0) == (has(oldObject.{{ . }}) ? oldObject.{{ . }}.size() : 0) && (!has(oldObject.{{ . }}) || oldObject.{{ . }}.all(k, has(object.{{ . }}) && k in object.{{ . }} && object.{{ . }}[k] == oldObject.{{ . }}[k])))
{{- end -}}

{{/* CEL: the TrainJob ownerReferences of the object named by . (a list, maybe empty). */}}
{{- define "holdfast.cel.trainjobOwners" -}}
(has({{ . }}.metadata.ownerReferences) ? {{ . }}.metadata.ownerReferences.filter(r, r.kind == 'TrainJob' && (r.apiVersion == 'trainer.kubeflow.org' || r.apiVersion.startsWith('trainer.kubeflow.org/'))) : [])
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

{{/* The match conditions of the snapshot rules (snapshots.validate and the snapshots policy):
every write of a snapshot ConfigMap but those the requester's identity alone decides. One
definition for both engines: tests/tests/it/match_conditions.rs proves they send every
request the policy refuses. */}}
{{- define "holdfast.conditions.snapshots" -}}
{{- $user := "request.userInfo.username" -}}
{{- $creators := include "holdfast.cel.list" (concat (include "holdfast.controllerUsers" . | fromJsonArray) .Values.identities.snapshotCreators) -}}
{{- $deleters := include "holdfast.cel.list" (concat (include "holdfast.controllerUsers" . | fromJsonArray) .Values.identities.snapshotDeleters) -}}
- name: runtime-snapshot
  expression: |-
    (has(request.name) && request.name.endsWith('-runtime-snapshot'))
    || (object != null && ((has(object.metadata.name) && object.metadata.name.endsWith('-runtime-snapshot')) || (has(object.metadata.labels) && 'holdfast.dev/runtime-snapshot' in object.metadata.labels)))
    || (oldObject != null && ((has(oldObject.metadata.name) && oldObject.metadata.name.endsWith('-runtime-snapshot')) || (has(oldObject.metadata.labels) && 'holdfast.dev/runtime-snapshot' in oldObject.metadata.labels)))
- name: not-decided-by-identity
  expression: |-
    !(request.operation == 'CREATE' && {{ $user }} in {{ $creators }})
    && !(request.operation == 'DELETE' && {{ $user }} in {{ $deleters }})
{{- end -}}

{{/* The match conditions of the TrainJob and Workload rules (jobs.validate and the
trainjobs and workloads policies): a write of holdfast state, a suspend flip, the queue keys, a Workload's TrainJob
owner or job-uid, a held Workload; not the controller's or Kueue's writes the rules allow. */}}
{{- define "holdfast.conditions.jobs" -}}
{{- $user := "request.userInfo.username" -}}
{{- $controllers := include "holdfast.cel.list" (include "holdfast.controllerUsers" . | fromJsonArray) -}}
{{- $kueue := include "holdfast.cel.list" .Values.identities.kueueUsers -}}
{{- $carriesNew := include "holdfast.cel.carries" "object" -}}
{{- $carriesOld := include "holdfast.cel.carries" "oldObject" -}}
{{- $flip := printf "(object != null && oldObject != null && %s != %s)" (include "holdfast.cel.suspended" "object") (include "holdfast.cel.suspended" "oldObject") -}}
{{- $queueKeys := printf "(request.resource.resource == 'trainjobs' && object != null && oldObject != null && (%s || %s || %s))" (include "holdfast.cel.keyChanges" (list "labels" "kueue.x-k8s.io/queue-name")) (include "holdfast.cel.keyChanges" (list "labels" "kueue.x-k8s.io/prebuilt-workload-name")) (include "holdfast.cel.keyChanges" (list "annotations" "kueue.x-k8s.io/prebuilt-workload-name")) -}}
{{- $owners := "(request.resource.resource == 'workloads' && object != null && ((has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == 'TrainJob')) || (oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob'))) && (oldObject == null || !has(object.metadata.ownerReferences) || !has(oldObject.metadata.ownerReferences) || object.metadata.ownerReferences != oldObject.metadata.ownerReferences))" -}}
{{- $jobUid := printf "(request.resource.resource == 'workloads' && object != null && oldObject != null && has(oldObject.metadata.ownerReferences) && oldObject.metadata.ownerReferences.exists(r, r.kind == 'TrainJob') && %s)" (include "holdfast.cel.keyChanges" (list "labels" "kueue.x-k8s.io/job-uid")) -}}
{{- $heldWorkload := "(request.resource.resource == 'workloads' && oldObject != null && has(oldObject.metadata.annotations) && 'holdfast.dev/hold-instance' in oldObject.metadata.annotations)" -}}
{{- $heldTrainJob := "(request.resource.resource == 'trainjobs' && oldObject != null && has(oldObject.metadata.annotations) && 'holdfast.dev/hold-instance' in oldObject.metadata.annotations)" -}}
{{- /* Kueue mode: an unsuspend of a TrainJob carrying a hold's mark (its Workload's hold is being placed or is in force); only the unsuspend, so that Kueue's own suspend never waits on holdfast. */ -}}
{{- $markedUnsuspend := printf "(request.resource.resource == 'trainjobs' && object != null && oldObject != null && has(oldObject.metadata.annotations) && 'holdfast.dev/hold-mark' in oldObject.metadata.annotations && %s && !%s)" (include "holdfast.cel.suspended" "oldObject") (include "holdfast.cel.suspended" "object") -}}
{{- /* Kueue mode: an unsuspend of a managed TrainJob (before or by the write) whose stored version has no opened mark: refused whoever sends it, Kueue included, so Kueue's must reach a fail-closed entry too. */ -}}
{{- $gatedUnsuspend := printf "(request.resource.resource == 'trainjobs' && object != null && oldObject != null && %s && !%s && !%s && (%s || %s))" (include "holdfast.cel.suspended" "oldObject") (include "holdfast.cel.suspended" "object") (include "holdfast.cel.hasAnnotation" (list "oldObject" "holdfast.dev/opened")) (include "holdfast.cel.managed" "oldObject") (include "holdfast.cel.managed" "object") -}}
{{- $stateChanges := include "holdfast.cel.stateChanges" "" -}}
{{- $kueueMode := eq .Values.mode "kueue" -}}
- name: holdfast-state
  {{- if $kueueMode }}
  expression: |-
    {{ $stateChanges }}
    || {{ $queueKeys }}
    || {{ $owners }}
    || {{ $jobUid }}
    || {{ $flip }}
    || {{ $heldWorkload }}
  {{- else }}
  expression: |-
    {{ $stateChanges }}
    || ({{ $flip }} && ({{ $carriesNew }} || {{ $carriesOld }}))
    || {{ $heldWorkload }}
  {{- end }}
- name: not-the-controller
  {{- if $kueueMode }}
  expression: |-
    !({{ $user }} in {{ $controllers }})
    || {{ $flip }}
  {{- else }}
  expression: "!({{ $user }} in {{ $controllers }})"
  {{- end }}
{{- if $kueueMode }}
- name: kueue-only-on-holdfast-state
  expression: |-
    !({{ $user }} in {{ $kueue }})
    || {{ $stateChanges }}
    || {{ $queueKeys }}
    || {{ $heldWorkload }}
    || ({{ $flip }} && {{ $heldTrainJob }})
    || {{ $markedUnsuspend }}
    || {{ $gatedUnsuspend }}
{{- end }}
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
