//! The window before the hold: a TrainJob's JobSet gets `podReplacementPolicy: Failed` on
//! every replicated Job.
//!
//! Neither Trainer nor JobSet sets `podReplacementPolicy` on the Jobs, so each defaults to
//! `TerminatingOrFailed`: when a node is lost, taint eviction marks its pods Terminating and
//! the Job controller at once creates a replacement for the same completion index (the same
//! rank) on another node while the old process may still run — two executions, no hold
//! involved. With `Failed` the Job controller waits until the old pod is terminal, which a
//! kubelet that is gone never reports (and the execution finalizer keeps the pod until its
//! kubelet confirms the end or its node is fenced).
//!
//! JobSet's own webhook refuses any change of `spec.replicatedJobs` after creation, so:
//!
//! - **CREATE** of a JobSet whose controller ownerReference is a TrainJob: every replicated
//!   Job whose template spec lacks `podReplacementPolicy: Failed` gets it. A runtime asking
//!   for another value is overridden (fail closed), and told so in a warning.
//! - **UPDATE** of such a JobSet: only a restore. A replicated Job (matched by `name`) whose
//!   stored template spec has `Failed` and whose new one lacks it or has another value (a
//!   whole-object write, or Trainer re-applying a runtime template that asks otherwise) gets
//!   `Failed` back: the stored value, never a change JobSet would refuse. A JobSet stored
//!   without it (created before holdfast was installed) is left alone.
//!
//! A replicated Job that is not an object, or whose `template` or `template.spec` is missing
//! or not an object, gets no patch (there is no Job template to run pods from; the apiserver
//! or JobSet refuses it); nor does a `spec.replicatedJobs` that is not a list.

use super::fields;
use super::object::{Doc, Object, REPLICATED_JOBS};
use super::{AdmissionInput, Operation};
use json_patch::{AddOperation, PatchOperation};
use jsonptr::PointerBuf;
use serde_json::{Map, Value};

/// The value every replicated Job of a TrainJob's JobSet gets.
pub const FAILED: &str = "Failed";
/// The Job spec member.
pub const POD_REPLACEMENT_POLICY: &str = "podReplacementPolicy";

/// What [`pod_replacement`] decided for one JobSet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Replacement {
    /// One `add` of `podReplacementPolicy: Failed` per replicated Job patched, in order.
    pub patch: Vec<PatchOperation>,
    /// The replicated Jobs (by name) whose template spec asked for another value and was
    /// overridden (CREATE), or whose stored `Failed` this update dropped or changed and the
    /// patch puts back (UPDATE): what the requester is told.
    pub told: Vec<String>,
}

/// What the mutating webhook does to a JobSet: see the module. `input` is a JobSet request
/// (no subresource); anything that is not a TrainJob's JobSet gets nothing.
pub fn pod_replacement(input: &AdmissionInput) -> Replacement {
    let Some(new) = Doc::of(input.object.as_ref()).object() else {
        return Replacement::default();
    };
    if !owned_by_a_trainjob(new) {
        return Replacement::default();
    }
    let Some(jobs) = replicated_jobs(new) else {
        return Replacement::default();
    };
    match input.operation {
        Operation::Create => on_create(jobs),
        Operation::Update => {
            let stored = Doc::of(input.old_object.as_ref())
                .object()
                .and_then(replicated_jobs)
                .unwrap_or(&[]);
            on_update(stored, jobs)
        }
        Operation::Delete | Operation::Connect => Replacement::default(),
    }
}

/// Whether `obj`'s controller ownerReference is a TrainJob (Trainer's JobSet).
fn owned_by_a_trainjob(obj: Object<'_>) -> bool {
    fields::trainjob_owners(obj)
        .into_iter()
        .any(|(_, controller)| controller)
}

fn replicated_jobs(obj: Object<'_>) -> Option<&[Value]> {
    obj.get(REPLICATED_JOBS)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
}

/// A replicated Job's name, if it has one.
fn name(job: &Value) -> Option<&str> {
    job.get("name").and_then(Value::as_str)
}

/// A replicated Job's Job template spec, if it is an object.
fn template_spec(job: &Value) -> Option<&Map<String, Value>> {
    job.get("template")?.get("spec")?.as_object()
}

/// What the template spec says (`None`: absent or `null`).
fn policy(spec: &Map<String, Value>) -> Option<&Value> {
    spec.get(POD_REPLACEMENT_POLICY).filter(|v| !v.is_null())
}

fn is_failed(spec: &Map<String, Value>) -> bool {
    policy(spec).and_then(Value::as_str) == Some(FAILED)
}

fn set_failed(index: usize) -> PatchOperation {
    let index = index.to_string();
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens([
            "spec",
            "replicatedJobs",
            index.as_str(),
            "template",
            "spec",
            POD_REPLACEMENT_POLICY,
        ]),
        value: Value::String(FAILED.to_owned()),
    })
}

/// For display: a replicated Job's name, or its index when it has none.
fn label(index: usize, job: &Value) -> String {
    name(job).map_or_else(|| format!("#{index}"), str::to_owned)
}

fn on_create(jobs: &[Value]) -> Replacement {
    let mut out = Replacement::default();
    for (i, job) in jobs.iter().enumerate() {
        let Some(spec) = template_spec(job) else {
            continue;
        };
        if is_failed(spec) {
            continue;
        }
        if policy(spec).is_some() {
            out.told.push(label(i, job));
        }
        out.patch.push(set_failed(i));
    }
    out
}

fn on_update(stored: &[Value], jobs: &[Value]) -> Replacement {
    let mut out = Replacement::default();
    for (i, job) in jobs.iter().enumerate() {
        let (Some(n), Some(spec)) = (name(job), template_spec(job)) else {
            continue;
        };
        let had_failed = stored
            .iter()
            .filter(|o| name(o) == Some(n))
            .filter_map(template_spec)
            .any(is_failed);
        if had_failed && !is_failed(spec) {
            out.told.push(n.to_owned());
            out.patch.push(set_failed(i));
        }
    }
    out
}

#[cfg(test)]
mod tests;
