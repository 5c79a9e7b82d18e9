//! The mutating webhook's decision: the patch, and what it did.

use super::fields;
use super::object::{ANNOTATIONS, Doc, Object, RUNTIME_REF, SUSPEND, Walk};
use super::pod_replacement::pod_replacement;
use super::{AdmissionInput, Identities, Operation, Resource};
use crate::mode::Mode;
use crate::names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION;
use crate::snapshot::{RuntimeRef, SnapshotError, runtime_ref};
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use jsonptr::PointerBuf;
use serde_json::{Map, Value, json};

/// What [`mutate`] decided for one request. The webhook answers with it as it is: the patch,
/// and the warnings (kubectl prints them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mutation {
    /// The JSON patch (RFC 6902); each operation applies to `input.object` in order. Empty
    /// when nothing changes.
    pub patch: Vec<PatchOperation>,
    /// The controller annotations a non-controller UPDATE dropped and the patch puts back,
    /// in key order.
    pub restored: Vec<String>,
    /// The patch closes a managed TrainJob's start gate (`spec.suspend: true` at its CREATE,
    /// plain mode).
    pub gate_closed: bool,
    /// The replicated Jobs (by name) of a TrainJob's JobSet whose `podReplacementPolicy`
    /// the patch sets to `Failed` over another value (CREATE) or back to the stored `Failed`
    /// (UPDATE): see [`pod_replacement`](super::pod_replacement). A JobSet created without
    /// the field gets it silently.
    pub replacement_policy_kept: Vec<String>,
    /// What the requester is told: the annotations restored (an explicit removal is undone,
    /// not refused: the apiserver presents a PATCH that removes an annotation and a
    /// whole-object replace that omits it alike, and this is how its author learns it), the
    /// start gate closed. The admitted runtime version is written silently: it is not the
    /// user's to write.
    pub warnings: Vec<String>,
}

impl Mutation {
    /// Nothing to patch.
    pub fn is_empty(&self) -> bool {
        self.patch.is_empty()
    }
}

/// What the mutating webhook does with `input`, as a [`Mutation`].
///
/// - UPDATE of a TrainJob or Workload by anyone but the controller: every controller
///   annotation the stored object has and the new one lacks (a whole-object replace such as
///   `kubectl replace` or a GitOps sync dropped it) is added back with the stored value. Never
///   an invented value; an annotation whose value was changed is left for [`validate`] to
///   refuse.
/// - CREATE of a TrainJob labelled `holdfast.dev/managed: "true"` in plain mode: the start
///   gate is closed, `spec.suspend: true`, unless it already is.
/// - CREATE and UPDATE of a JobSet whose controller is a TrainJob: every replicated Job gets
///   `podReplacementPolicy: Failed` at the CREATE, and keeps it at an UPDATE that drops or
///   changes it ([`pod_replacement`](super::pod_replacement)).
/// - CREATE of a TrainJob: `holdfast.dev/admitted-runtime-resource-version` is set to
///   `admitted_runtime_rv` (the resourceVersion of the runtime [`runtime_to_record`] named,
///   as the webhook read it at this admission), overwriting whatever the user wrote; when the
///   webhook could not read the runtime (`None`), a user-supplied value is removed, so nobody
///   forges it.
///
/// Subresource writes (`status`) and everything else get no patch. Where the object or the
/// map a patch must go into is not a JSON object (garbage the apiserver would reject anyway),
/// no patch is made and [`validate`] says what is wrong.
///
/// [`validate`]: super::validate
pub fn mutate(
    input: &AdmissionInput,
    who: &Identities,
    mode: Mode,
    admitted_runtime_rv: Option<&str>,
) -> Mutation {
    if input.subresource.is_some() {
        return Mutation::default();
    }
    let mut m = match (&input.resource, input.operation) {
        (Resource::TrainJob | Resource::Workload, Operation::Update)
            if !who.is_controller(&input.user.username) =>
        {
            restore_dropped_annotations(input)
        }
        (Resource::TrainJob, Operation::Create) => {
            create_trainjob(input, mode, admitted_runtime_rv)
        }
        (Resource::JobSet, Operation::Create | Operation::Update) => {
            let r = pod_replacement(input);
            Mutation {
                patch: r.patch,
                replacement_policy_kept: r.told,
                ..Mutation::default()
            }
        }
        _ => Mutation::default(),
    };
    m.warnings = warnings(input, &m);
    m
}

/// The runtime whose resourceVersion [`mutate`] records on a TrainJob being created (its
/// `spec.runtimeRef`), for the webhook to read first; `None` for every other request. An
/// error says why the TrainJob names no readable runtime; it is admitted without the record.
pub fn runtime_to_record(input: &AdmissionInput) -> Option<Result<RuntimeRef, SnapshotError>> {
    if input.resource != Resource::TrainJob
        || input.operation != Operation::Create
        || input.subresource.is_some()
    {
        return None;
    }
    let object = input.object.as_ref()?;
    // `runtime_ref` reads `spec.runtimeRef` alone; it gets that field and nothing else.
    let only = match Doc::of(Some(object))
        .object()
        .and_then(|o| o.get(RUNTIME_REF))
    {
        Some(r) => json!({ "spec": { "runtimeRef": r } }),
        None => json!({}),
    };
    Some(runtime_ref(&only))
}

fn warnings(input: &AdmissionInput, m: &Mutation) -> Vec<String> {
    let told: Vec<&str> = m
        .restored
        .iter()
        .map(String::as_str)
        .filter(|k| *k != ANN_ADMITTED_RUNTIME_RESOURCE_VERSION)
        .collect();
    let mut out = Vec::new();
    if !told.is_empty() {
        out.push(format!(
            "holdfast kept annotation(s) {} on {} {}: this update removed them, and they are written only by the holdfast controller",
            told.join(", "),
            input.resource.kind(),
            input.object_ref()
        ));
    }
    if !m.replacement_policy_kept.is_empty() {
        let what = match input.operation {
            Operation::Update => {
                "kept podReplacementPolicy: Failed, which this update dropped or changed (a JobSet's replicated Jobs do not change after its creation),"
            }
            _ => "set podReplacementPolicy: Failed, overriding the value the JobSet asked for,",
        };
        out.push(format!(
            "holdfast {what} on replicated Job(s) {} of JobSet {}: a TrainJob's Job replaces a pod only once it has failed, never beside one still terminating on a lost node",
            m.replacement_policy_kept.join(", "),
            input.object_ref()
        ));
    }
    if m.gate_closed {
        out.push(format!(
            "holdfast set spec.suspend: true on TrainJob {}: a TrainJob labelled holdfast.dev/managed=true starts at its closed start gate, opened by the holdfast controller",
            input.object_ref()
        ));
    }
    out
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn add(tokens: &[&str], value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation {
        path: pointer(tokens),
        value,
    })
}

fn remove(tokens: &[&str]) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation {
        path: pointer(tokens),
    })
}

/// Operations that give `obj` the annotations `set` (keys in order); none when there is
/// nothing to set or something in the way is not an object.
fn set_annotations(obj: Object<'_>, set: Map<String, Value>) -> Vec<PatchOperation> {
    if set.is_empty() {
        return Vec::new();
    }
    match obj.walk(ANNOTATIONS) {
        // `metadata.annotations` is a map: add each key.
        Walk::Found(Value::Object(_)) => set
            .into_iter()
            .map(|(k, v)| add(&["metadata", "annotations", &k], v))
            .collect(),
        // No `metadata` at all: add it.
        Walk::Missing(0) => {
            let mut metadata = Map::new();
            metadata.insert("annotations".to_owned(), Value::Object(set));
            vec![add(&["metadata"], Value::Object(metadata))]
        }
        // `metadata` is a map without annotations: add the whole map.
        Walk::Missing(_) => vec![add(&["metadata", "annotations"], Value::Object(set))],
        Walk::Found(_) | Walk::Blocked(_) => Vec::new(),
    }
}

fn restore_dropped_annotations(input: &AdmissionInput) -> Mutation {
    let (Some(old), Some(new)) = (
        Doc::of(input.old_object.as_ref()).object(),
        Doc::of(input.object.as_ref()).object(),
    ) else {
        return Mutation::default();
    };
    let present = fields::annotations(new);
    let dropped: Map<String, Value> = fields::controller_annotations(old)
        .into_iter()
        .filter(|(k, _)| !present.is_some_and(|a| a.contains_key(*k)))
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    let keys: Vec<String> = dropped.keys().cloned().collect();
    let patch = set_annotations(new, dropped);
    Mutation {
        restored: if patch.is_empty() { Vec::new() } else { keys },
        patch,
        ..Mutation::default()
    }
}

fn create_trainjob(
    input: &AdmissionInput,
    mode: Mode,
    admitted_runtime_rv: Option<&str>,
) -> Mutation {
    let Some(obj) = Doc::of(input.object.as_ref()).object() else {
        return Mutation::default();
    };
    let mut m = Mutation::default();

    if mode == Mode::Plain && fields::managed(obj) && !fields::suspended(obj) {
        let close = match obj.walk(SUSPEND) {
            Walk::Missing(0) => {
                let mut spec = Map::new();
                spec.insert("suspend".to_owned(), Value::Bool(true));
                Some(add(&["spec"], Value::Object(spec)))
            }
            Walk::Blocked(_) => None,
            Walk::Missing(_) | Walk::Found(_) => Some(add(&["spec", "suspend"], Value::Bool(true))),
        };
        m.gate_closed = close.is_some();
        m.patch.extend(close);
    }

    let supplied =
        fields::annotations(obj).and_then(|a| a.get(ANN_ADMITTED_RUNTIME_RESOURCE_VERSION));
    match admitted_runtime_rv {
        Some(rv) if supplied.and_then(Value::as_str) != Some(rv) => {
            let mut set = Map::new();
            set.insert(
                ANN_ADMITTED_RUNTIME_RESOURCE_VERSION.to_owned(),
                Value::String(rv.to_owned()),
            );
            m.patch.extend(set_annotations(obj, set));
        }
        None if supplied.is_some() => {
            m.patch.push(remove(&[
                "metadata",
                "annotations",
                ANN_ADMITTED_RUNTIME_RESOURCE_VERSION,
            ]));
        }
        _ => {}
    }
    m
}

#[cfg(test)]
mod tests;
