{{- /*
Generated from core/src/policy/rules (cargo test -p holdfast-core policy::rules::chart;
HOLDFAST_BLESS=1 rewrites it): change the rules there, not here.
*/ -}}

{{/* CEL: the object named by . (object or oldObject) carries holdfast state: an annotation,
label or finalizer whose key starts with holdfast.dev/. */}}
{{- define "holdfast.cel.carries" -}}
({{ . }} != null && ((has({{ . }}.metadata.annotations) && {{ . }}.metadata.annotations.exists(k, k.startsWith('holdfast.dev/'))) || (has({{ . }}.metadata.labels) && {{ . }}.metadata.labels.exists(k, k.startsWith('holdfast.dev/'))) || (has({{ . }}.metadata.finalizers) && {{ . }}.metadata.finalizers.exists(f, f.startsWith('holdfast.dev/')))))
{{- end -}}

{{/* CEL: the object named by . is suspended (spec.suspend: true; absent = false). */}}
{{- define "holdfast.cel.suspended" -}}
(has({{ . }}.spec) && has({{ . }}.spec.suspend) && {{ . }}.spec.suspend == true)
{{- end -}}

{{/* CEL: the object named by . is labelled holdfast.dev/managed=true. */}}
{{- define "holdfast.cel.managed" -}}
(has({{ . }}.metadata.labels) && 'holdfast.dev/managed' in {{ . }}.metadata.labels && {{ . }}.metadata.labels['holdfast.dev/managed'] == 'true')
{{- end -}}

{{/* CEL: the queue the object named by . is in: its queue-name label, or ''. */}}
{{- define "holdfast.cel.queue" -}}
((has({{ . }}.metadata.labels) && 'kueue.x-k8s.io/queue-name' in {{ . }}.metadata.labels) ? {{ . }}.metadata.labels['kueue.x-k8s.io/queue-name'] : '')
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
