//! The mutating webhook's patch.

use super::fields::{self, Doc};
use super::{AdmissionInput, Identities, Operation, Resource};
use crate::mode::Mode;
use crate::names::ANN_ADMITTED_RUNTIME_RESOURCE_VERSION;
use json_patch::{AddOperation, PatchOperation, RemoveOperation};
use jsonptr::PointerBuf;
use serde_json::{Map, Value};

/// The JSON patch (RFC 6902) the mutating webhook returns for `input`; empty when nothing
/// changes. Each operation applies to `input.object` in order.
///
/// - UPDATE of a TrainJob or Workload by anyone but the controller: every controller
///   annotation the stored object has and the new one lacks (a whole-object replace such as
///   `kubectl replace` or a GitOps sync dropped it) is added back with the stored value. Never
///   an invented value; an annotation whose value was changed is left for [`validate`] to
///   refuse.
/// - CREATE of a TrainJob labelled `holdfast.dev/managed: "true"` in plain mode: the start
///   gate is closed, `spec.suspend: true`, unless it already is.
/// - CREATE of a TrainJob: `holdfast.dev/admitted-runtime-resource-version` is set to
///   `admitted_runtime_rv` (the runtime's resourceVersion the webhook read at this
///   admission), overwriting whatever the user wrote; when the webhook could not read the
///   runtime (`None`), a user-supplied value is removed, so nobody forges it.
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
) -> Vec<PatchOperation> {
    if input.subresource.is_some() {
        return Vec::new();
    }
    match (&input.resource, input.operation) {
        (Resource::TrainJob | Resource::Workload, Operation::Update)
            if !who.is_controller(&input.user.username) =>
        {
            restore_dropped_annotations(input)
        }
        (Resource::TrainJob, Operation::Create) => {
            create_trainjob(input, mode, admitted_runtime_rv)
        }
        _ => Vec::new(),
    }
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

/// Where new annotations can be written into `obj`.
enum AnnotationsAt {
    /// `metadata.annotations` is a map: add each key.
    Map,
    /// `metadata` is a map without annotations: add the whole map.
    NoAnnotations,
    /// No `metadata` at all: add it.
    NoMetadata,
    /// Something in the way is not an object: no patch.
    Blocked,
}

fn annotations_at(obj: &Map<String, Value>) -> AnnotationsAt {
    match obj.get("metadata") {
        None | Some(Value::Null) => AnnotationsAt::NoMetadata,
        Some(Value::Object(m)) => match m.get("annotations") {
            None | Some(Value::Null) => AnnotationsAt::NoAnnotations,
            Some(Value::Object(_)) => AnnotationsAt::Map,
            Some(_) => AnnotationsAt::Blocked,
        },
        Some(_) => AnnotationsAt::Blocked,
    }
}

/// Operations that give `obj` the annotations `set` (keys in order).
fn set_annotations(obj: &Map<String, Value>, set: Map<String, Value>) -> Vec<PatchOperation> {
    if set.is_empty() {
        return Vec::new();
    }
    match annotations_at(obj) {
        AnnotationsAt::Map => set
            .into_iter()
            .map(|(k, v)| add(&["metadata", "annotations", &k], v))
            .collect(),
        AnnotationsAt::NoAnnotations => vec![add(&["metadata", "annotations"], Value::Object(set))],
        AnnotationsAt::NoMetadata => {
            let mut metadata = Map::new();
            metadata.insert("annotations".to_owned(), Value::Object(set));
            vec![add(&["metadata"], Value::Object(metadata))]
        }
        AnnotationsAt::Blocked => Vec::new(),
    }
}

fn restore_dropped_annotations(input: &AdmissionInput) -> Vec<PatchOperation> {
    let (Some(old), Some(new)) = (
        Doc::of(input.old_object.as_ref()).object(),
        Doc::of(input.object.as_ref()).object(),
    ) else {
        return Vec::new();
    };
    let present = fields::annotations(new);
    let dropped: Map<String, Value> = fields::controller_annotations(old)
        .into_iter()
        .filter(|(k, _)| !present.is_some_and(|a| a.contains_key(*k)))
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    set_annotations(new, dropped)
}

fn create_trainjob(
    input: &AdmissionInput,
    mode: Mode,
    admitted_runtime_rv: Option<&str>,
) -> Vec<PatchOperation> {
    let Some(obj) = Doc::of(input.object.as_ref()).object() else {
        return Vec::new();
    };
    let mut ops = Vec::new();

    if mode == Mode::Plain && fields::managed(obj) && !fields::suspended(obj) {
        match obj.get("spec") {
            Some(Value::Object(_)) => ops.push(add(&["spec", "suspend"], Value::Bool(true))),
            None | Some(Value::Null) => {
                let mut spec = Map::new();
                spec.insert("suspend".to_owned(), Value::Bool(true));
                ops.push(add(&["spec"], Value::Object(spec)));
            }
            Some(_) => {}
        }
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
            ops.extend(set_annotations(obj, set));
        }
        None if supplied.is_some() => {
            ops.push(remove(&[
                "metadata",
                "annotations",
                ANN_ADMITTED_RUNTIME_RESOURCE_VERSION,
            ]));
        }
        _ => {}
    }
    ops
}

#[cfg(test)]
mod tests;
