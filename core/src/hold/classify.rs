//! What state a TrainJob is in, as the Status call reports it: held by us, deactivated by
//! Kueue for its own reason (with that reason), deactivated by someone else, at its start
//! gate, pending, running, or finished. Pure functions of what was read.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::HoldState;
use crate::mode::Mode;

/// The prefix of the Evicted reason Kueue gives a Workload it deactivated for its own
/// reasons (`DeactivatedDueToRequeuingLimitExceeded`,
/// `DeactivatedDueToMaximumExecutionTimeExceeded`, `DeactivatedDueToAdmissionCheck`, ...).
/// A Workload deactivated by a user is evicted with reason `Deactivated` (older Kueue:
/// `InactiveWorkload`) instead.
pub const KUEUE_DEACTIVATED_DUE_TO: &str = "DeactivatedDueTo";

/// A TrainJob's state, classified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind")]
pub enum ObjectState {
    /// The TrainJob is Complete (`succeeded`) or Failed.
    Finished { succeeded: bool },
    /// A hold of ours is on the held object. `instance` is `None` when the annotation is
    /// not a decimal u64. `underlying`: what had already stopped the object when the hold was
    /// placed (or, in Kueue mode, a deactivation of Kueue's own since), which Release leaves
    /// in place.
    HeldByUs {
        instance: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        underlying: Option<Underlying>,
    },
    /// Kueue mode: Kueue deactivated the Workload for its own reason (a requeueing limit, a
    /// maximum execution time, a rejected admission check). Not a hold.
    DeactivatedByKueue { reason: String },
    /// Stopped without a hold of ours and not by Kueue for a reason of its own: plain mode,
    /// an opened TrainJob someone suspended; Kueue mode, a Workload someone deactivated.
    DeactivatedBySomeoneElse,
    /// Not yet opened, and held at the start gate (plain mode: suspended; Kueue mode: the
    /// TrainJob is suspended, waiting for admission and the readmission gate).
    AtStartGate,
    /// Kueue mode: opened, but waiting: `waitingFor` says for what (its Workload, Kueue's
    /// quota, or an admission check such as the readmission gate).
    Pending {
        #[serde(rename = "waitingFor")]
        waiting_for: Waiting,
    },
    /// Not stopped: the execution is (or is about to be) running.
    Running,
}

/// What a `Pending` TrainJob waits for (Kueue mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum Waiting {
    /// Kueue has not created the TrainJob's Workload yet: Open would answer `NoWorkload`.
    Workload,
    /// The Workload waits for Kueue to reserve quota for it.
    Quota,
    /// Quota is reserved, and an admission check is not Ready yet: holdfast's readmission
    /// gate (the previous execution's pods remain, see `remainingPods`) or another check of
    /// the ClusterQueue; or, for a moment, Kueue has admitted it and not yet unsuspended it.
    AdmissionChecks,
}

/// A stop under a hold of ours, which is not ours and which Release does not lift.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind")]
pub enum Underlying {
    /// Kueue mode: Kueue deactivated the Workload for its own reason.
    DeactivatedByKueue { reason: String },
    /// Someone else suspended the TrainJob (plain mode) or deactivated the Workload (Kueue
    /// mode).
    DeactivatedBySomeoneElse,
}

impl Underlying {
    /// Reads the value of [`crate::names::ANN_HOLD_FOUND`]: Kueue's own reason
    /// (`DeactivatedDueTo...`) or anything else (`suspended`, `inactive`).
    pub fn from_found(found: &str) -> Underlying {
        if found.starts_with(KUEUE_DEACTIVATED_DUE_TO) {
            Underlying::DeactivatedByKueue {
                reason: found.to_owned(),
            }
        } else {
            Underlying::DeactivatedBySomeoneElse
        }
    }
}

/// What [`classify`] looks at, already read from the objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed<'a> {
    pub mode: Mode,
    /// The hold on the held object (the Workload in Kueue mode; `Absent` if there is none).
    pub hold: &'a HoldState,
    /// [`trainjob_finished`] of the TrainJob's conditions.
    pub finished: Option<bool>,
    /// The TrainJob's `holdfast.dev/opened` mark.
    pub opened: bool,
    /// The held object is stopped: plain, the TrainJob's `spec.suspend`; Kueue, the
    /// Workload's `spec.active` is false. False when there is no Workload.
    pub held_stopped: bool,
    /// The TrainJob's own `spec.suspend` (in Kueue mode, Kueue's to set).
    pub trainjob_suspended: bool,
    /// Kueue mode: whether the TrainJob has a Workload.
    pub workload_present: bool,
    /// Kueue mode: the Workload's `QuotaReserved` condition is `True`.
    pub quota_reserved: bool,
    /// Kueue mode: Kueue's own deactivation reason, from [`kueue_deactivation_reason`].
    pub kueue_reason: Option<&'a str>,
    /// The hold's [`crate::names::ANN_HOLD_FOUND`]: what stopped the held object before the
    /// hold was placed.
    pub found: Option<&'a str>,
}

/// Classifies a TrainJob. A finished job is `Finished` whatever else holds; then our hold;
/// then why it is stopped; else `Running`.
pub fn classify(o: &Observed<'_>) -> ObjectState {
    if let Some(succeeded) = o.finished {
        return ObjectState::Finished { succeeded };
    }
    if o.hold.is_held() {
        let underlying = match (o.mode, o.kueue_reason, o.found) {
            (Mode::Kueue, Some(reason), _) => Some(Underlying::DeactivatedByKueue {
                reason: reason.to_owned(),
            }),
            (_, _, Some(found)) => Some(Underlying::from_found(found)),
            _ => None,
        };
        return ObjectState::HeldByUs {
            instance: o.hold.instance(),
            underlying,
        };
    }
    let gate_or = |otherwise: ObjectState| {
        if o.opened {
            otherwise
        } else {
            ObjectState::AtStartGate
        }
    };
    match o.mode {
        Mode::Plain if o.held_stopped => gate_or(ObjectState::DeactivatedBySomeoneElse),
        Mode::Plain => ObjectState::Running,
        // No Workload: Kueue does not manage the job (no queue name). Suspended, it waits;
        // not suspended, it runs — never reported as waiting.
        Mode::Kueue if !o.workload_present && !o.trainjob_suspended => ObjectState::Running,
        Mode::Kueue if !o.workload_present => gate_or(ObjectState::Pending {
            waiting_for: Waiting::Workload,
        }),
        Mode::Kueue if o.held_stopped => match o.kueue_reason {
            Some(reason) => ObjectState::DeactivatedByKueue {
                reason: reason.to_owned(),
            },
            None => ObjectState::DeactivatedBySomeoneElse,
        },
        Mode::Kueue if o.trainjob_suspended => gate_or(ObjectState::Pending {
            waiting_for: if o.quota_reserved {
                Waiting::AdmissionChecks
            } else {
                Waiting::Quota
            },
        }),
        Mode::Kueue => ObjectState::Running,
    }
}

/// Whether a TrainJob has finished, from its `status.conditions` array: `Some(true)` if
/// `Complete` is `"True"`, `Some(false)` if `Failed` is `"True"` (Failed wins if both are),
/// `None` otherwise, including when `conditions` is not an array.
pub fn trainjob_finished(conditions: &Value) -> Option<bool> {
    let conditions = conditions.as_array()?;
    let is_true = |kind: &str| {
        conditions.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    if is_true("Failed") {
        Some(false)
    } else if is_true("Complete") {
        Some(true)
    } else {
        None
    }
}

/// Kueue's own reason for deactivating a Workload, from its `status.conditions` array, or
/// `None` if Kueue did not deactivate it for a reason of its own.
///
/// Kueue first marks the Workload with a `DeactivationTarget` condition (reason e.g.
/// `RequeuingLimitExceeded`), then sets `active: false` and evicts it with reason
/// `DeactivatedDueTo<that reason>`. Either is recognised; the answer is always the
/// `DeactivatedDueTo...` form. An eviction for a user's deactivation (`Deactivated`,
/// `InactiveWorkload`) is not Kueue's own reason.
pub fn kueue_deactivation_reason(conditions: &Value) -> Option<String> {
    let conditions = conditions.as_array()?;
    let true_reason = |kind: &str| {
        conditions.iter().find_map(|c| {
            (c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True"))
            .then(|| c.get("reason").and_then(Value::as_str))
            .flatten()
            .filter(|r| !r.is_empty())
        })
    };
    if let Some(r) = true_reason("Evicted").filter(|r| r.starts_with(KUEUE_DEACTIVATED_DUE_TO)) {
        return Some(r.to_owned());
    }
    true_reason("DeactivationTarget").map(|r| {
        if r.starts_with(KUEUE_DEACTIVATED_DUE_TO) {
            r.to_owned()
        } else {
            format!("{KUEUE_DEACTIVATED_DUE_TO}{r}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::HoldRecord;
    use serde_json::json;

    fn observed(mode: Mode, hold: &HoldState) -> Observed<'_> {
        Observed {
            mode,
            hold,
            finished: None,
            opened: true,
            held_stopped: false,
            trainjob_suspended: false,
            workload_present: true,
            quota_reserved: false,
            kueue_reason: None,
            found: None,
        }
    }

    fn held(instance: u64) -> HoldState {
        HoldState::InForce(HoldRecord {
            instance,
            reason: None,
            placed_at: None,
            holder: None,
        })
    }

    #[test]
    fn trainjob_is_finished_when_complete_or_failed_is_true() {
        let cases = [
            (json!([{"type": "Complete", "status": "True"}]), Some(true)),
            (json!([{"type": "Failed", "status": "True"}]), Some(false)),
            (
                json!([{"type": "Complete", "status": "True"}, {"type": "Failed", "status": "True"}]),
                Some(false),
            ),
            (json!([{"type": "Complete", "status": "False"}]), None),
            (json!([{"type": "Suspended", "status": "True"}]), None),
            (json!([{"type": "Failed", "status": true}]), None),
            (json!([]), None),
            (json!(null), None),
            (json!({"type": "Complete", "status": "True"}), None),
        ];
        for (conditions, want) in cases {
            assert_eq!(trainjob_finished(&conditions), want, "{conditions}");
        }
    }

    #[test]
    fn kueue_deactivation_is_classified_from_its_reason_not_as_a_hold() {
        let cases = [
            (
                json!([{"type": "Evicted", "status": "True", "reason": "DeactivatedDueToRequeuingLimitExceeded"}]),
                Some("DeactivatedDueToRequeuingLimitExceeded"),
            ),
            (
                json!([{"type": "Evicted", "status": "True", "reason": "DeactivatedDueToMaximumExecutionTimeExceeded"}]),
                Some("DeactivatedDueToMaximumExecutionTimeExceeded"),
            ),
            (
                json!([{"type": "DeactivationTarget", "status": "True", "reason": "AdmissionCheck"}]),
                Some("DeactivatedDueToAdmissionCheck"),
            ),
            (
                json!([{"type": "Evicted", "status": "True", "reason": "Deactivated"}]),
                None,
            ),
            (
                json!([{"type": "Evicted", "status": "True", "reason": "InactiveWorkload"}]),
                None,
            ),
            (
                json!([{"type": "Evicted", "status": "False", "reason": "DeactivatedDueToAdmissionCheck"}]),
                None,
            ),
            (json!(null), None),
        ];
        for (conditions, want) in cases {
            let got = kueue_deactivation_reason(&conditions);
            assert_eq!(got.as_deref(), want, "{conditions}");
            let hold = HoldState::Absent;
            let state = classify(&Observed {
                held_stopped: true,
                kueue_reason: got.as_deref(),
                ..observed(Mode::Kueue, &hold)
            });
            match want {
                Some(r) => assert_eq!(
                    state,
                    ObjectState::DeactivatedByKueue {
                        reason: r.to_owned()
                    }
                ),
                None => assert_eq!(state, ObjectState::DeactivatedBySomeoneElse),
            }
        }
    }

    #[test]
    fn our_hold_is_told_apart_by_its_annotation() {
        let ours = held(5);
        for mode in [Mode::Plain, Mode::Kueue] {
            let state = classify(&Observed {
                held_stopped: true,
                kueue_reason: Some("DeactivatedDueToRequeuingLimitExceeded"),
                ..observed(mode, &ours)
            });
            let underlying = (mode == Mode::Kueue).then(|| Underlying::DeactivatedByKueue {
                reason: "DeactivatedDueToRequeuingLimitExceeded".into(),
            });
            assert_eq!(
                state,
                ObjectState::HeldByUs {
                    instance: Some(5),
                    underlying
                },
                "{mode}: a hold, with Kueue's own reason under it"
            );
        }
        let unreadable = HoldState::Unreadable {
            value: "x".into(),
            holder: None,
        };
        assert_eq!(
            classify(&Observed {
                held_stopped: true,
                ..observed(Mode::Plain, &unreadable)
            }),
            ObjectState::HeldByUs {
                instance: None,
                underlying: None
            }
        );
    }

    #[test]
    fn states_are_classified() {
        let none = HoldState::Absent;
        let ours = held(2);
        let base = |mode| observed(mode, &none);
        let cases: Vec<(&str, Observed<'_>, ObjectState)> = vec![
            (
                "finished wins over a hold",
                Observed {
                    finished: Some(true),
                    ..observed(Mode::Plain, &ours)
                },
                ObjectState::Finished { succeeded: true },
            ),
            (
                "failed",
                Observed {
                    finished: Some(false),
                    ..base(Mode::Kueue)
                },
                ObjectState::Finished { succeeded: false },
            ),
            (
                "plain, suspended, never opened",
                Observed {
                    opened: false,
                    held_stopped: true,
                    ..base(Mode::Plain)
                },
                ObjectState::AtStartGate,
            ),
            (
                "plain, suspended after opening, no hold",
                Observed {
                    held_stopped: true,
                    ..base(Mode::Plain)
                },
                ObjectState::DeactivatedBySomeoneElse,
            ),
            ("plain, running", base(Mode::Plain), ObjectState::Running),
            (
                "kueue, no Workload yet, opened",
                Observed {
                    workload_present: false,
                    trainjob_suspended: true,
                    ..base(Mode::Kueue)
                },
                ObjectState::Pending {
                    waiting_for: Waiting::Workload,
                },
            ),
            (
                "kueue, no Workload, not suspended: running, never waiting",
                Observed {
                    workload_present: false,
                    opened: false,
                    ..base(Mode::Kueue)
                },
                ObjectState::Running,
            ),
            (
                "plain, held over someone else's suspend",
                Observed {
                    held_stopped: true,
                    found: Some("suspended"),
                    ..observed(Mode::Plain, &ours)
                },
                ObjectState::HeldByUs {
                    instance: Some(2),
                    underlying: Some(Underlying::DeactivatedBySomeoneElse),
                },
            ),
            (
                "kueue, held over Kueue's own deactivation, recorded",
                Observed {
                    held_stopped: true,
                    found: Some("DeactivatedDueToMaximumExecutionTimeExceeded"),
                    ..observed(Mode::Kueue, &ours)
                },
                ObjectState::HeldByUs {
                    instance: Some(2),
                    underlying: Some(Underlying::DeactivatedByKueue {
                        reason: "DeactivatedDueToMaximumExecutionTimeExceeded".into(),
                    }),
                },
            ),
            (
                "kueue, not opened",
                Observed {
                    opened: false,
                    trainjob_suspended: true,
                    ..base(Mode::Kueue)
                },
                ObjectState::AtStartGate,
            ),
            (
                "kueue, opened, waiting for quota",
                Observed {
                    trainjob_suspended: true,
                    ..base(Mode::Kueue)
                },
                ObjectState::Pending {
                    waiting_for: Waiting::Quota,
                },
            ),
            (
                "kueue, opened, quota reserved, waiting at a gate",
                Observed {
                    trainjob_suspended: true,
                    quota_reserved: true,
                    ..base(Mode::Kueue)
                },
                ObjectState::Pending {
                    waiting_for: Waiting::AdmissionChecks,
                },
            ),
            ("kueue, admitted", base(Mode::Kueue), ObjectState::Running),
        ];
        for (name, o, want) in cases {
            assert_eq!(classify(&o), want, "{name}");
        }
    }

    #[test]
    fn states_serialise_with_a_kind_tag() {
        let v = serde_json::to_value(ObjectState::DeactivatedByKueue {
            reason: "DeactivatedDueToAdmissionCheck".into(),
        })
        .expect("json");
        assert_eq!(
            v,
            json!({"kind": "DeactivatedByKueue", "reason": "DeactivatedDueToAdmissionCheck"})
        );
        let v = serde_json::to_value(ObjectState::Running).expect("json");
        assert_eq!(v, json!({"kind": "Running"}));
    }
}
