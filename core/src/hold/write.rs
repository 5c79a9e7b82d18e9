//! The single update a call makes, abstract over the mode, and how it is rendered onto the
//! object that was read.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{HeldObject, HoldError, Outcome};
use crate::{mode::Mode, names::HOLD_FINALIZER};

/// One update of one object, preconditioned on the resourceVersion of the read it was
/// decided on. The executor GETs `target`, [`apply`]s this to it and PUTs the result: a
/// 409 means the object changed since the read, and the call reads and decides again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The object to update: the one the call read ([`super::Call::target`]).
    pub target: HeldObject,
    /// The resourceVersion of the read; the update's precondition.
    pub precondition: String,
    /// `Some(true)` stops the object, `Some(false)` lets it run: a TrainJob's
    /// `spec.suspend` in plain mode, a Workload's `spec.active` (inverted) in Kueue mode.
    /// `None` leaves it alone. Never `Some` for a TrainJob in Kueue mode: Kueue owns
    /// `spec.suspend` there.
    pub stop: Option<bool>,
    /// Annotations to set, with their values.
    pub set_annotations: BTreeMap<String, String>,
    /// Annotations to remove (absent ones are fine).
    pub remove_annotations: BTreeSet<String>,
    /// Kueue mode: `Some(true)` adds the hold finalizer ([`HOLD_FINALIZER`]) to the Workload,
    /// `Some(false)` removes it, in the same update as the hold. `None` leaves the
    /// finalizers alone. Never `Some` for a TrainJob.
    pub hold_finalizer: Option<bool>,
    /// What the call reports once this write has landed.
    pub outcome: Outcome,
}

impl Write {
    /// A write of `target` preconditioned on `precondition` that changes nothing yet.
    pub fn new(target: HeldObject, precondition: impl Into<String>, outcome: Outcome) -> Self {
        Write {
            target,
            precondition: precondition.into(),
            stop: None,
            set_annotations: BTreeMap::new(),
            remove_annotations: BTreeSet::new(),
            hold_finalizer: None,
            outcome,
        }
    }

    pub(crate) fn set(&mut self, key: &str, value: impl Into<String>) {
        self.remove_annotations.remove(key);
        self.set_annotations.insert(key.to_owned(), value.into());
    }

    pub(crate) fn remove(&mut self, key: &str) {
        self.set_annotations.remove(key);
        self.remove_annotations.insert(key.to_owned());
    }
}

/// Why a [`Write`] could not be rendered onto an object.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// The object read, or one of its `metadata`, `metadata.annotations` or `spec`, is not a
    /// JSON object.
    #[error("{0} of the object read is not a JSON object")]
    NotAnObject(&'static str),
    /// A write that would set a TrainJob's `spec.suspend` in Kueue mode.
    #[error("holdfast never writes a TrainJob's spec.suspend in Kueue mode: Kueue owns it")]
    SuspendInKueueMode,
    /// A write that would change a TrainJob's finalizers: only a held Workload carries one.
    #[error("the hold finalizer belongs on a Kueue Workload, never on a TrainJob")]
    FinalizerOnTrainJob,
    /// The object read has a `metadata.finalizers` that is not a list of strings.
    #[error("metadata.finalizers of the object read is not a list of strings")]
    MalformedFinalizers,
}

impl From<ApplyError> for HoldError {
    fn from(e: ApplyError) -> Self {
        HoldError::invalid(e.to_string())
    }
}

/// Renders `write` onto `obj`, the object as read (JSON), so that PUTting `obj` makes
/// exactly this update: sets `metadata.resourceVersion` to the precondition, removes and
/// sets the annotations, sets `spec.suspend` (TrainJob) or `spec.active` (Workload), and
/// adds or removes the hold finalizer. Everything else in `obj` is left as read; other
/// finalizers keep their order.
///
/// Checks everything before changing anything: on error `obj` is untouched.
pub fn apply(write: &Write, obj: &mut Value, mode: Mode) -> Result<(), ApplyError> {
    if write.stop.is_some() && write.target == HeldObject::TrainJob && mode == Mode::Kueue {
        return Err(ApplyError::SuspendInKueueMode);
    }
    let root = obj.as_object().ok_or(ApplyError::NotAnObject("the root"))?;
    check_object_or_absent(root, "metadata", "metadata")?;
    if let Some(meta) = root.get("metadata").and_then(Value::as_object) {
        check_object_or_absent(meta, "annotations", "metadata.annotations")?;
    }
    if write.stop.is_some() {
        check_object_or_absent(root, "spec", "spec")?;
    }
    if write.hold_finalizer.is_some() {
        if write.target == HeldObject::TrainJob {
            return Err(ApplyError::FinalizerOnTrainJob);
        }
        match root.get("metadata").and_then(|m| m.get("finalizers")) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {}
            Some(_) => return Err(ApplyError::MalformedFinalizers),
        }
    }

    let root = obj
        .as_object_mut()
        .ok_or(ApplyError::NotAnObject("the root"))?;
    let meta = object_entry(root, "metadata").ok_or(ApplyError::NotAnObject("metadata"))?;
    meta.insert(
        "resourceVersion".to_owned(),
        Value::String(write.precondition.clone()),
    );
    if !write.set_annotations.is_empty() || !write.remove_annotations.is_empty() {
        let ann = object_entry(meta, "annotations")
            .ok_or(ApplyError::NotAnObject("metadata.annotations"))?;
        for key in &write.remove_annotations {
            ann.remove(key);
        }
        for (key, value) in &write.set_annotations {
            ann.insert(key.clone(), Value::String(value.clone()));
        }
    }
    if let Some(add) = write.hold_finalizer {
        let mut finalizers: Vec<Value> = match meta.remove("finalizers") {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        let present = finalizers
            .iter()
            .any(|f| f.as_str() == Some(HOLD_FINALIZER));
        if add && !present {
            finalizers.push(Value::String(HOLD_FINALIZER.to_owned()));
        } else if !add {
            finalizers.retain(|f| f.as_str() != Some(HOLD_FINALIZER));
        }
        if !finalizers.is_empty() {
            meta.insert("finalizers".to_owned(), Value::Array(finalizers));
        }
    }
    if let Some(stop) = write.stop {
        let spec = object_entry(root, "spec").ok_or(ApplyError::NotAnObject("spec"))?;
        match write.target {
            HeldObject::TrainJob => spec.insert("suspend".to_owned(), Value::Bool(stop)),
            HeldObject::Workload => spec.insert("active".to_owned(), Value::Bool(!stop)),
        };
    }
    Ok(())
}

fn check_object_or_absent(
    map: &Map<String, Value>,
    key: &str,
    what: &'static str,
) -> Result<(), ApplyError> {
    match map.get(key) {
        None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err(ApplyError::NotAnObject(what)),
    }
}

/// `map[key]` as an object, created if absent or null.
fn object_entry<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let entry = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{ANN_HOLD_INSTANCE, ANN_HOLD_REASON, ANN_OPENED};
    use serde_json::json;

    fn hold_write(target: HeldObject) -> Write {
        let mut w = Write::new(target, "77", Outcome::Held);
        w.stop = Some(true);
        w.set(ANN_HOLD_INSTANCE, "3");
        w.remove(ANN_HOLD_REASON);
        w
    }

    #[test]
    fn apply_renders_a_plain_write_on_suspend_with_the_precondition() {
        let mut tj = json!({
            "metadata": {"name": "mnist", "resourceVersion": "80",
                         "annotations": {ANN_HOLD_REASON: "old", ANN_OPENED: "true"}},
            "spec": {"suspend": false, "runtimeRef": {"name": "torch"}}
        });
        apply(&hold_write(HeldObject::TrainJob), &mut tj, Mode::Plain).expect("apply");
        assert_eq!(
            tj,
            json!({
                "metadata": {"name": "mnist", "resourceVersion": "77",
                             "annotations": {ANN_HOLD_INSTANCE: "3", ANN_OPENED: "true"}},
                "spec": {"suspend": true, "runtimeRef": {"name": "torch"}}
            })
        );
    }

    #[test]
    fn apply_renders_a_kueue_write_on_active() {
        let mut wl = json!({"metadata": {"resourceVersion": "5"}, "spec": {"active": true, "queueName": "q"}});
        apply(&hold_write(HeldObject::Workload), &mut wl, Mode::Kueue).expect("apply");
        assert_eq!(wl["spec"], json!({"active": false, "queueName": "q"}));
        assert_eq!(wl["metadata"]["annotations"][ANN_HOLD_INSTANCE], "3");
        assert!(
            wl.pointer("/spec/suspend").is_none(),
            "never suspend in kueue mode"
        );

        let mut release = Write::new(
            HeldObject::Workload,
            "6",
            Outcome::Released { resumed: true },
        );
        release.stop = Some(false);
        release.remove(ANN_HOLD_INSTANCE);
        apply(&release, &mut wl, Mode::Kueue).expect("apply");
        assert_eq!(wl["spec"]["active"], true);
        assert_eq!(wl["metadata"]["annotations"], json!({}));
        assert_eq!(wl["metadata"]["resourceVersion"], "6");
    }

    #[test]
    fn apply_adds_and_removes_the_hold_finalizer_keeping_others() {
        let mut wl = json!({"metadata": {"resourceVersion": "5",
            "finalizers": ["kueue.x-k8s.io/resource-in-use"]}, "spec": {"active": true}});
        let mut hold = hold_write(HeldObject::Workload);
        hold.hold_finalizer = Some(true);
        apply(&hold, &mut wl, Mode::Kueue).expect("apply");
        assert_eq!(
            wl["metadata"]["finalizers"],
            json!(["kueue.x-k8s.io/resource-in-use", HOLD_FINALIZER])
        );
        apply(&hold, &mut wl, Mode::Kueue).expect("apply again");
        assert_eq!(
            wl["metadata"]["finalizers"],
            json!(["kueue.x-k8s.io/resource-in-use", HOLD_FINALIZER]),
            "never twice"
        );
        let mut release = Write::new(
            HeldObject::Workload,
            "6",
            Outcome::Released { resumed: true },
        );
        release.hold_finalizer = Some(false);
        apply(&release, &mut wl, Mode::Kueue).expect("apply");
        assert_eq!(
            wl["metadata"]["finalizers"],
            json!(["kueue.x-k8s.io/resource-in-use"])
        );
        let mut bare = json!({"metadata": {"finalizers": [HOLD_FINALIZER]}});
        apply(&release, &mut bare, Mode::Kueue).expect("apply");
        assert!(bare["metadata"].get("finalizers").is_none(), "{bare}");
    }

    #[test]
    fn apply_refuses_a_finalizer_on_a_trainjob_or_malformed_finalizers() {
        let mut w = Write::new(HeldObject::TrainJob, "1", Outcome::Held);
        w.hold_finalizer = Some(true);
        let mut tj = json!({"metadata": {}});
        assert_eq!(
            apply(&w, &mut tj, Mode::Plain),
            Err(ApplyError::FinalizerOnTrainJob)
        );
        w.target = HeldObject::Workload;
        let mut wl = json!({"metadata": {"finalizers": [1]}});
        let before = wl.clone();
        assert_eq!(
            apply(&w, &mut wl, Mode::Kueue),
            Err(ApplyError::MalformedFinalizers)
        );
        assert_eq!(wl, before);
    }

    #[test]
    fn apply_refuses_suspend_in_kueue_mode() {
        let mut tj = json!({"metadata": {}, "spec": {"suspend": true}});
        let before = tj.clone();
        let mut w = Write::new(HeldObject::TrainJob, "1", Outcome::Opened { started: true });
        w.stop = Some(false);
        assert_eq!(
            apply(&w, &mut tj, Mode::Kueue),
            Err(ApplyError::SuspendInKueueMode)
        );
        assert_eq!(tj, before);
    }

    #[test]
    fn apply_creates_missing_maps_and_refuses_malformed_objects() {
        let mut bare = json!({"metadata": {"annotations": null}});
        apply(&hold_write(HeldObject::TrainJob), &mut bare, Mode::Plain).expect("apply");
        assert_eq!(bare["spec"]["suspend"], true);
        assert_eq!(bare["metadata"]["annotations"][ANN_HOLD_INSTANCE], "3");

        for (mut obj, what) in [
            (json!([]), "the root"),
            (json!({"metadata": "x"}), "metadata"),
            (
                json!({"metadata": {"annotations": []}}),
                "metadata.annotations",
            ),
            (json!({"spec": 1}), "spec"),
        ] {
            let before = obj.clone();
            let err = apply(&hold_write(HeldObject::TrainJob), &mut obj, Mode::Plain)
                .expect_err("malformed");
            assert_eq!(err, ApplyError::NotAnObject(what));
            assert_eq!(obj, before, "untouched on error");
            assert_eq!(HoldError::from(err).kind(), "Invalid");
        }
    }
}
