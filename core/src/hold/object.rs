//! Reading holdfast's marks and the stop fields out of a TrainJob or Workload as JSON, the
//! way the I/O layer GETs them. Pure; nothing here panics on a malformed object.

use std::collections::BTreeMap;

use serde_json::Value;

use super::classify;
use super::{HeldObject, HoldError, HoldState, parse_decimal};
use crate::names::{ANN_ATTEMPT, ANN_OPENED};

/// The value of annotation `key` on `obj`, if present and a string.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.get("metadata")?.get("annotations")?.get(key)?.as_str()
}

/// All string-valued annotations of `obj`.
pub fn annotations(obj: &Value) -> BTreeMap<String, String> {
    obj.get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .map(|a| {
            a.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.resourceVersion`, if present and non-empty.
pub fn resource_version(obj: &Value) -> Option<&str> {
    obj.get("metadata")?
        .get("resourceVersion")?
        .as_str()
        .filter(|rv| !rv.is_empty())
}

/// The hold in force on a held object (the TrainJob in plain mode, the Workload in Kueue
/// mode), read from its `holdfast.dev/hold-*` annotations.
pub fn hold_state(held: &Value) -> HoldState {
    HoldState::from_lookup(|k| annotation(held, k))
}

/// Whether the TrainJob's start gate was opened: the `holdfast.dev/opened` annotation is
/// present (holdfast writes `"true"`; its presence is what counts).
pub fn opened(trainjob: &Value) -> bool {
    annotation(trainjob, ANN_OPENED).is_some()
}

/// A, the TrainJob's execution counter: 0 when absent. A value that is not a decimal u64 is
/// `Invalid`, because writing `A + 1` from a guess could lower A.
pub fn attempt(trainjob: &Value) -> Result<u64, HoldError> {
    match annotation(trainjob, ANN_ATTEMPT) {
        None => Ok(0),
        Some(v) => parse_decimal(v).ok_or_else(|| {
            HoldError::invalid(format!(
                "the TrainJob's {ANN_ATTEMPT} annotation {v:?} is not a decimal number"
            ))
        }),
    }
}

/// Whether `obj`, a `kind` object, is stopped: a TrainJob's `spec.suspend` is true, or a
/// Workload's `spec.active` is false (Kueue defaults an absent `active` to true).
pub fn stopped(obj: &Value, kind: HeldObject) -> bool {
    let spec = obj.get("spec");
    match kind {
        HeldObject::TrainJob => spec
            .and_then(|s| s.get("suspend"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        HeldObject::Workload => !spec
            .and_then(|s| s.get("active"))
            .and_then(Value::as_bool)
            .unwrap_or(true),
    }
}

/// Whether the TrainJob has ended: `Some(true)` Complete, `Some(false)` Failed, `None` not
/// finished. See [`classify::trainjob_finished`].
pub fn finished(trainjob: &Value) -> Option<bool> {
    classify::trainjob_finished(
        trainjob
            .pointer("/status/conditions")
            .unwrap_or(&Value::Null),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{ANN_HOLD_INSTANCE, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON};
    use serde_json::json;

    #[test]
    fn marks_are_read_from_annotations() {
        let tj = json!({"metadata":{"resourceVersion":"42","annotations":{
            ANN_OPENED: "true", ANN_ATTEMPT: "3", ANN_HOLD_INSTANCE: "7",
            ANN_HOLD_REASON: "node lost", ANN_HOLD_PLACED_AT: "2026-11-29T11:00:00Z",
            "other": 5
        }},"spec":{"suspend":true}});
        assert!(opened(&tj));
        assert_eq!(attempt(&tj), Ok(3));
        assert_eq!(resource_version(&tj), Some("42"));
        assert!(stopped(&tj, HeldObject::TrainJob));
        assert_eq!(annotations(&tj).len(), 5, "non-string values are skipped");
        match hold_state(&tj) {
            HoldState::InForce(r) => {
                assert_eq!(r.instance, 7);
                assert_eq!(r.reason.as_deref(), Some("node lost"));
                assert_eq!(r.placed_at.as_deref(), Some("2026-11-29T11:00:00Z"));
            }
            other => panic!("expected a hold in force, got {other:?}"),
        }
    }

    #[test]
    fn a_bare_object_has_no_marks_and_runs() {
        for obj in [
            json!({}),
            json!(null),
            json!({"metadata":{"annotations":null}}),
        ] {
            assert!(!opened(&obj));
            assert_eq!(attempt(&obj), Ok(0));
            assert_eq!(resource_version(&obj), None);
            assert_eq!(hold_state(&obj), HoldState::Absent);
            assert!(!stopped(&obj, HeldObject::TrainJob));
            assert!(
                !stopped(&obj, HeldObject::Workload),
                "Kueue's default is active"
            );
            assert_eq!(finished(&obj), None);
        }
    }

    #[test]
    fn a_workload_is_stopped_when_inactive() {
        assert!(stopped(
            &json!({"spec":{"active":false}}),
            HeldObject::Workload
        ));
        assert!(!stopped(
            &json!({"spec":{"active":true}}),
            HeldObject::Workload
        ));
    }

    #[test]
    fn unreadable_attempt_is_invalid() {
        for v in ["", "-1", "+1", "one", " 1", "18446744073709551616"] {
            let tj = json!({"metadata":{"annotations":{ANN_ATTEMPT: v}}});
            assert!(
                matches!(attempt(&tj), Err(HoldError::Invalid { .. })),
                "{v:?}"
            );
        }
    }
}
