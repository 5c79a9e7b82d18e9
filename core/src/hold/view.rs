//! What one read of the held object saw, reduced to what the state machine decides on.

use serde_json::Value;

use super::classify;
use super::{Call, HeldObject, HoldError, HoldState, Seen, object};
use crate::{mode::Mode, names::ANN_HOLD_FOUND};

/// [`ANN_HOLD_FOUND`] of a plain-mode hold placed on an opened TrainJob someone had suspended.
pub const FOUND_SUSPENDED: &str = "suspended";
/// [`ANN_HOLD_FOUND`] of a Kueue-mode hold placed on a Workload someone (not Kueue, for a
/// reason of its own) had deactivated.
pub const FOUND_INACTIVE: &str = "inactive";

/// What one read saw, already extracted from the object(s) by the I/O layer (or by
/// [`HeldView::read`]).
///
/// In plain mode every field comes from the TrainJob. In Kueue mode the hold and `stopped`
/// come from the Workload; `opened`, `attempt` and `ended` from the TrainJob; and
/// `resource_version` is that of the object the call writes ([`Call::target`]): the Workload
/// for Hold and Release, the TrainJob for Open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldView {
    pub mode: Mode,
    /// The precondition of the write decided on this read.
    pub resource_version: String,
    pub hold: HoldState,
    /// `holdfast.dev/opened` is on the TrainJob.
    pub opened: bool,
    /// A, from the TrainJob (0 if absent).
    pub attempt: u64,
    /// Plain: the TrainJob's `spec.suspend` is true. Kueue: the Workload's `spec.active` is
    /// false.
    pub stopped: bool,
    /// The TrainJob is Complete or Failed.
    pub ended: bool,
    /// Plain mode: a pod of the TrainJob's current execution remains. Only plain-mode Release
    /// (and Open, when it would start the job) reads it; the I/O layer may leave it false for
    /// every other call.
    pub pods_remain: bool,
    /// The held object's [`ANN_HOLD_FOUND`], as read: what stopped it before the hold in force
    /// was placed.
    pub found: Option<String>,
    /// What stops the held object now besides a hold of ours, as [`ANN_HOLD_FOUND`] would
    /// record it: plain mode, `suspended` for an opened TrainJob that is suspended (a
    /// never-opened one is at its start gate, which is ours); Kueue mode, Kueue's own
    /// deactivation reason, or `inactive`, for an inactive Workload. Only meaningful while no
    /// hold is in force.
    pub stop_cause: Option<String>,
}

impl HeldView {
    /// Builds the view a `call` decides on from the objects as read: the TrainJob, and in
    /// Kueue mode its Workload.
    ///
    /// Kueue mode without a Workload is `Rejected { cause: NoWorkload }` for every call. For
    /// Hold and Release that is the answer. For Open it means "not yet": start waits for the
    /// Workload, so that every started object has one, and the executor re-reads until the
    /// Workload exists or the deadline passes.
    ///
    /// An object without a resourceVersion, or with an unreadable A, is `Invalid`: writing
    /// without a precondition, or writing a guessed A, could undo a newer write.
    pub fn read(
        call: &Call,
        mode: Mode,
        trainjob: &Value,
        workload: Option<&Value>,
        pods_remain: bool,
    ) -> Result<HeldView, HoldError> {
        let held = match mode {
            Mode::Plain => trainjob,
            Mode::Kueue => workload.ok_or_else(|| {
                HoldError::no_workload("the TrainJob has no Kueue Workload to hold")
            })?,
        };
        let held_kind = match mode {
            Mode::Plain => HeldObject::TrainJob,
            Mode::Kueue => HeldObject::Workload,
        };
        let target = match call.target(mode) {
            HeldObject::TrainJob => trainjob,
            HeldObject::Workload => held,
        };
        let resource_version = object::resource_version(target)
            .ok_or_else(|| {
                HoldError::invalid(format!(
                    "the {:?} read has no metadata.resourceVersion",
                    call.target(mode)
                ))
            })?
            .to_owned();
        let opened = object::opened(trainjob);
        let stopped = object::stopped(held, held_kind);
        let stop_cause = match mode {
            Mode::Plain => (stopped && opened).then(|| FOUND_SUSPENDED.to_owned()),
            Mode::Kueue => stopped.then(|| {
                held.pointer("/status/conditions")
                    .and_then(classify::kueue_deactivation_reason)
                    .unwrap_or_else(|| FOUND_INACTIVE.to_owned())
            }),
        };
        Ok(HeldView {
            mode,
            resource_version,
            hold: object::hold_state(held),
            opened,
            attempt: object::attempt(trainjob)?,
            stopped,
            ended: object::finished(trainjob).is_some(),
            pods_remain,
            found: object::annotation(held, ANN_HOLD_FOUND).map(str::to_owned),
            stop_cause,
        })
    }

    /// The hold instance this read saw.
    pub fn seen(&self) -> Seen {
        self.hold.seen()
    }
}

/// What a call does with the objects it has just read, before it decides.
#[derive(Debug)]
pub enum AfterRead {
    /// Decide on this view.
    Decide(HeldView),
    /// Read again after a pause: Start waits for the Workload (Open, Kueue mode, no Workload
    /// yet), so that every started object has one. The call's deadline bounds the wait.
    ReadAgain,
    /// The call's answer: the objects as read cannot be decided on.
    Answer(HoldError),
}

/// The seed's "If the TrainJob has no Workload, Hold returns ErrRejected. Start waits for the
/// Workload, so every started object has one": [`HeldView::read`]'s refusal for want of a
/// Workload is Hold's and Release's answer, and Open's reason to read again.
pub fn after_read(
    call: &Call,
    mode: Mode,
    trainjob: &Value,
    workload: Option<&Value>,
) -> AfterRead {
    match HeldView::read(call, mode, trainjob, workload, false) {
        Ok(view) => AfterRead::Decide(view),
        Err(e)
            if call.kind() == super::CallKind::Open
                && e.cause() == Some(super::RejectCause::NoWorkload) =>
        {
            AfterRead::ReadAgain
        }
        Err(e) => AfterRead::Answer(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        hold::RejectCause,
        names::{ANN_ATTEMPT, ANN_HOLD_INSTANCE, ANN_OPENED},
    };
    use serde_json::json;

    fn hold() -> Call {
        Call::Hold {
            instance: 1,
            reason: None,
            placed_at: jiff::Timestamp::UNIX_EPOCH,
            by: crate::hold::CallerId::new("dispatch"),
        }
    }

    fn trainjob() -> Value {
        json!({
            "metadata": {"resourceVersion": "10", "annotations": {ANN_OPENED: "true", ANN_ATTEMPT: "2"}},
            "spec": {"suspend": true},
            "status": {"conditions": [{"type": "Complete", "status": "True"}]}
        })
    }

    fn workload() -> Value {
        json!({
            "metadata": {"resourceVersion": "20", "annotations": {ANN_HOLD_INSTANCE: "4"}},
            "spec": {"active": false}
        })
    }

    #[test]
    fn hold_without_workload_is_rejected_in_kueue_mode() {
        for call in [
            hold(),
            Call::Release {
                instance: 1,
                by: crate::hold::CallerId::new("dispatch"),
            },
            Call::Open,
        ] {
            let err = HeldView::read(&call, Mode::Kueue, &trainjob(), None, false)
                .expect_err("no workload");
            assert_eq!(err.cause(), Some(RejectCause::NoWorkload), "{call:?}");
        }
    }

    #[test]
    fn start_waits_for_the_workload() {
        // Open, in Kueue mode with no Workload yet: read again (the deadline bounds it).
        assert!(matches!(
            after_read(&Call::Open, Mode::Kueue, &trainjob(), None),
            AfterRead::ReadAgain
        ));
        // Hold and Release answer the refusal at once.
        for call in [
            hold(),
            Call::Release {
                instance: 1,
                by: crate::hold::CallerId::new("dispatch"),
            },
        ] {
            match after_read(&call, Mode::Kueue, &trainjob(), None) {
                AfterRead::Answer(e) => {
                    assert_eq!(e.cause(), Some(RejectCause::NoWorkload), "{call:?}")
                }
                other => panic!("{call:?}: {other:?}"),
            }
        }
        // Once the Workload exists, Open decides; in plain mode it never waits for one.
        let wl = workload();
        assert!(matches!(
            after_read(&Call::Open, Mode::Kueue, &trainjob(), Some(&wl)),
            AfterRead::Decide(_)
        ));
        assert!(matches!(
            after_read(&Call::Open, Mode::Plain, &trainjob(), None),
            AfterRead::Decide(_)
        ));
        // Any other refusal is the answer, Open's too.
        let unversioned = json!({"metadata": {}});
        assert!(matches!(
            after_read(&Call::Open, Mode::Kueue, &unversioned, Some(&wl)),
            AfterRead::Answer(_)
        ));
    }

    #[test]
    fn kueue_view_reads_the_hold_from_the_workload_and_marks_from_the_trainjob() {
        let wl = workload();
        let view =
            HeldView::read(&hold(), Mode::Kueue, &trainjob(), Some(&wl), false).expect("view");
        assert_eq!(view.resource_version, "20", "Hold writes the Workload");
        assert_eq!(view.hold.instance(), Some(4));
        assert!(view.stopped, "active: false");
        assert!(view.opened);
        assert_eq!(view.attempt, 2);
        assert!(view.ended);
        let view =
            HeldView::read(&Call::Open, Mode::Kueue, &trainjob(), Some(&wl), false).expect("view");
        assert_eq!(view.resource_version, "10", "Open writes the TrainJob");
    }

    #[test]
    fn plain_view_reads_everything_from_the_trainjob() {
        let wl = workload();
        let view =
            HeldView::read(&hold(), Mode::Plain, &trainjob(), Some(&wl), true).expect("view");
        assert_eq!(view.resource_version, "10");
        assert_eq!(
            view.hold,
            HoldState::Absent,
            "a Workload is ignored in plain mode"
        );
        assert!(view.stopped, "suspend: true");
        assert!(view.pods_remain);
    }

    #[test]
    fn a_read_without_resource_version_is_invalid() {
        let tj = json!({"metadata": {}});
        let err = HeldView::read(&hold(), Mode::Plain, &tj, None, false).expect_err("no rv");
        assert_eq!(err.kind(), "Invalid");
    }
}
