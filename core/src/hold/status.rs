//! The Status call's answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[cfg(test)]
use super::classify::Waiting;
use super::classify::{self, ObjectState, Observed};
use super::{HeldObject, HoldError, HoldState, object};
use crate::{
    execution::RemainingPod,
    mode::Mode,
    names::{ANN_HOLD_FOUND, ANN_HOLD_PLACED_AT, ANN_HOLD_REASON},
};

/// The hold in force, as Status reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HoldStatus {
    /// `None` when the annotation is not a decimal u64; `unreadableInstance` then has it.
    pub instance: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreadable_instance: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_at: Option<String>,
    /// Who placed it (`holdfast.dev/hold-holder`): the username that alone may release it or
    /// replace it with another instance, besides an overrider. Absent for a hold placed
    /// before holdfast recorded holders, which any caller allowed the call may release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
}

/// `GET .../status`: the hold in force, the opened mark, A, and the state classified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub mode: Mode,
    /// The object holds are written on: the Workload in Kueue mode, the TrainJob in plain.
    pub held_object: HeldObject,
    /// `null` when no hold is in force.
    pub hold: Option<HoldStatus>,
    pub opened: bool,
    pub attempt: u64,
    pub state: ObjectState,
    /// Kueue mode: the name of the TrainJob's Workload (the one its controller
    /// ownerReference names). Absent while it has none, and in plain mode: a supervisor's
    /// Start waits for it before it Opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The pods of the TrainJob's executions that remain (found by ownership, as the
    /// readmission gate and Release find them), each with its node and what that node
    /// says: while any remains, a Release or the gate waits. Empty when none does.
    #[serde(default)]
    pub remaining_pods: Vec<RemainingPod>,
    /// Why the start gate will not open this managed TrainJob, and what to fix: it has no
    /// runtime snapshot (`holdfast_core::snapshot::open_gate`). Absent when nothing blocks it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_blocked: Option<String>,
}

impl Status {
    /// Reads a TrainJob's status from the TrainJob and, in Kueue mode, its Workload (`None`
    /// if it has none yet: the state is then `Pending` or `AtStartGate`, with no hold).
    /// The only error is an unreadable A (`Invalid`).
    pub fn read(
        mode: Mode,
        trainjob: &Value,
        workload: Option<&Value>,
    ) -> Result<Status, HoldError> {
        let (held, held_object) = match mode {
            Mode::Plain => (Some(trainjob), HeldObject::TrainJob),
            Mode::Kueue => (workload, HeldObject::Workload),
        };
        let hold_state = held.map(object::hold_state).unwrap_or(HoldState::Absent);
        let hold = held.filter(|_| hold_state.is_held()).map(|h| HoldStatus {
            instance: hold_state.instance(),
            unreadable_instance: match &hold_state {
                HoldState::Unreadable { value, .. } => Some(value.clone()),
                _ => None,
            },
            reason: object::annotation(h, ANN_HOLD_REASON).map(str::to_owned),
            placed_at: object::annotation(h, ANN_HOLD_PLACED_AT).map(str::to_owned),
            holder: hold_state.holder().map(str::to_owned),
        });
        let opened = object::opened(trainjob);
        let quota_reserved = workload
            .filter(|_| mode == Mode::Kueue)
            .and_then(|w| w.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .is_some_and(|conditions| {
                conditions.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("QuotaReserved")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            });
        let kueue_reason = workload
            .filter(|_| mode == Mode::Kueue)
            .and_then(|w| w.pointer("/status/conditions"))
            .and_then(classify::kueue_deactivation_reason);
        let state = classify::classify(&Observed {
            mode,
            hold: &hold_state,
            finished: object::finished(trainjob),
            opened,
            held_stopped: held.is_some_and(|h| object::stopped(h, held_object)),
            trainjob_suspended: object::stopped(trainjob, HeldObject::TrainJob),
            workload_present: workload.is_some(),
            quota_reserved,
            kueue_reason: kueue_reason.as_deref(),
            found: held.and_then(|h| object::annotation(h, ANN_HOLD_FOUND)),
        });
        Ok(Status {
            mode,
            held_object,
            hold,
            opened,
            attempt: object::attempt(trainjob)?,
            state,
            workload: workload
                .filter(|_| mode == Mode::Kueue)
                .and_then(|w| w.pointer("/metadata/name"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            remaining_pods: Vec::new(),
            start_blocked: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{ANN_ATTEMPT, ANN_HOLD_HOLDER, ANN_HOLD_INSTANCE, ANN_OPENED};
    use serde_json::json;

    #[test]
    fn status_reports_hold_opened_attempt_and_state() {
        let tj = json!({
            "metadata": {"annotations": {
                ANN_OPENED: "true", ANN_ATTEMPT: "4", ANN_HOLD_INSTANCE: "9",
                ANN_HOLD_REASON: "node lost", ANN_HOLD_PLACED_AT: "2026-11-29T11:00:00Z",
                ANN_HOLD_HOLDER: "system:serviceaccount:team-a:dispatch"}},
            "spec": {"suspend": true}
        });
        let status = Status::read(Mode::Plain, &tj, None).expect("status");
        assert_eq!(
            status.body(),
            json!({
                "result": "Ok",
                "mode": "plain",
                "heldObject": "TrainJob",
                "hold": {"instance": 9, "reason": "node lost", "placedAt": "2026-11-29T11:00:00Z",
                         "holder": "system:serviceaccount:team-a:dispatch"},
                "opened": true,
                "attempt": 4,
                "state": {"kind": "HeldByUs", "instance": 9},
                "remainingPods": []
            })
        );
    }

    #[test]
    fn kueue_status_reads_the_hold_from_the_workload() {
        let tj =
            json!({"metadata": {"annotations": {ANN_OPENED: "true"}}, "spec": {"suspend": true}});
        let wl = json!({
            "metadata": {},
            "spec": {"active": false},
            "status": {"conditions": [{"type": "Evicted", "status": "True",
                                       "reason": "DeactivatedDueToRequeuingLimitExceeded"}]}
        });
        let status = Status::read(Mode::Kueue, &tj, Some(&wl)).expect("status");
        assert_eq!(status.hold, None);
        assert_eq!(status.attempt, 0);
        assert_eq!(
            status.state,
            ObjectState::DeactivatedByKueue {
                reason: "DeactivatedDueToRequeuingLimitExceeded".into()
            }
        );
    }

    #[test]
    fn status_tells_no_workload_yet_from_waiting_at_a_gate() {
        let tj =
            json!({"metadata": {"annotations": {ANN_OPENED: "true"}}, "spec": {"suspend": true}});
        let none = Status::read(Mode::Kueue, &tj, None).expect("status");
        assert_eq!(
            none.state,
            ObjectState::Pending {
                waiting_for: Waiting::Workload
            }
        );
        assert_eq!(none.workload, None);
        let body = none.body();
        assert_eq!(
            body["state"],
            json!({"kind": "Pending", "waitingFor": "Workload"})
        );
        assert!(body.get("workload").is_none(), "{body}");

        let queued = json!({"metadata": {"name": "trainjob-job-1a2b3"}, "spec": {"active": true},
                            "status": {"conditions": []}});
        let waiting = Status::read(Mode::Kueue, &tj, Some(&queued)).expect("status");
        assert_eq!(
            waiting.state,
            ObjectState::Pending {
                waiting_for: Waiting::Quota
            }
        );
        assert_eq!(waiting.workload.as_deref(), Some("trainjob-job-1a2b3"));

        let gated = json!({"metadata": {"name": "trainjob-job-1a2b3"}, "spec": {"active": true},
                           "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}],
                                      "admissionChecks": [{"name": "holdfast-readmission",
                                                           "state": "Pending"}]}});
        let at_gate = Status::read(Mode::Kueue, &tj, Some(&gated)).expect("status");
        assert_eq!(
            at_gate.state,
            ObjectState::Pending {
                waiting_for: Waiting::AdmissionChecks
            }
        );
        assert_eq!(
            at_gate.body()["state"],
            json!({"kind": "Pending", "waitingFor": "AdmissionChecks"})
        );

        // Not opened: at the start gate either way, and `workload` tells the two apart.
        let unopened = json!({"metadata": {}, "spec": {"suspend": true}});
        let before = Status::read(Mode::Kueue, &unopened, None).expect("status");
        let after = Status::read(Mode::Kueue, &unopened, Some(&queued)).expect("status");
        assert_eq!(before.state, ObjectState::AtStartGate);
        assert_eq!(after.state, ObjectState::AtStartGate);
        assert_eq!(
            (before.workload, after.workload.as_deref()),
            (None, Some("trainjob-job-1a2b3"))
        );
    }

    #[test]
    fn status_shows_an_unreadable_hold() {
        let tj = json!({"metadata": {"annotations": {ANN_HOLD_INSTANCE: "seven"}}, "spec": {"suspend": true}});
        let status = Status::read(Mode::Plain, &tj, None).expect("status");
        let hold = status.hold.expect("a hold");
        assert_eq!(hold.instance, None);
        assert_eq!(hold.unreadable_instance.as_deref(), Some("seven"));
        assert_eq!(
            status.state,
            ObjectState::HeldByUs {
                instance: None,
                underlying: None
            }
        );
    }
}
