//! What a call does after it has decided to write: whether it marks the TrainJob first, and
//! what it does with the write's answer. The executor sends the requests; the choices are
//! made here.

use super::{Call, HeldObject};
use crate::mode::Mode;

/// Kueue mode: a Hold that writes the Workload marks the TrainJob first (`holdfast.dev/
/// hold-mark`, [`super::mark`]), so that nobody, Kueue included, unsuspends the TrainJob on a
/// view from before the hold. The hold's instance is the mark's. Nothing else marks: Release
/// and Open never stop a job, and a plain-mode Hold suspends the TrainJob itself.
///
/// `configured` is the controller's mode, not the mode a carried hold acts in: in plain mode
/// nothing reads a mark, whatever hold is in force.
pub fn marks_first(call: &Call, target: HeldObject, configured: Mode) -> Option<u64> {
    match (call, target, configured) {
        (Call::Hold { instance, .. }, HeldObject::Workload, Mode::Kueue) => Some(*instance),
        _ => None,
    }
}

/// How the apiserver answered a call's preconditioned write that did not land, as far as the
/// call cares. (The mark before a Hold's write sorts its own answers: the controller's
/// `hold::mark`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteAnswer {
    /// 409: the object changed since the read.
    Conflict,
    /// 404: the object is gone (a Workload deleted and replaced between the read and the
    /// write).
    Gone,
    /// The answer was lost (the apiserver unreachable, overloaded, or timed out on its side):
    /// the write may have landed.
    Lost,
    /// The call's deadline passed before the answer: the write may still land, within the
    /// CallBound.
    PastDeadline,
    /// Refused for good (a 403, a 422, …).
    Refused,
}

/// What the call does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterWrite {
    /// Read again and decide again, spending one of the call's tries.
    ReadAgain,
    /// Pause, then read again, spending no try: the read shows whether the write landed. A
    /// write's outcome is recorded as unknown until a read settles it.
    PauseAndReadAgain,
    /// Answer that the deadline passed, the outcome unknown.
    DeadlinePassed,
    /// Answer the apiserver's refusal.
    Fail,
}

/// The seed's preconditioned writes: a write that lost to another writer (409), or whose
/// object was replaced (404), is decided again on a fresh read, never sent again blind; a
/// write whose answer was lost is settled by reading, not by writing again.
pub fn after_write(answer: WriteAnswer) -> AfterWrite {
    match answer {
        WriteAnswer::Conflict | WriteAnswer::Gone => AfterWrite::ReadAgain,
        WriteAnswer::Lost => AfterWrite::PauseAndReadAgain,
        WriteAnswer::PastDeadline => AfterWrite::DeadlinePassed,
        WriteAnswer::Refused => AfterWrite::Fail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::CallerId;
    use jiff::Timestamp;

    fn hold() -> Call {
        Call::Hold {
            instance: 7,
            reason: None,
            placed_at: Timestamp::UNIX_EPOCH,
            by: CallerId::new("dispatch"),
        }
    }

    #[test]
    fn in_kueue_mode_a_hold_on_the_workload_marks_the_trainjob_first() {
        let release = Call::Release {
            instance: 7,
            by: CallerId::new("dispatch"),
        };
        let open = Call::Open;
        let rows = [
            (hold(), HeldObject::Workload, Mode::Kueue, Some(7)),
            // A plain-mode hold carried into kueue mode writes the TrainJob: nothing to mark.
            (hold(), HeldObject::TrainJob, Mode::Kueue, None),
            // A kueue-mode hold carried into plain mode: nothing reads a mark there.
            (hold(), HeldObject::Workload, Mode::Plain, None),
            (hold(), HeldObject::TrainJob, Mode::Plain, None),
            (release.clone(), HeldObject::Workload, Mode::Kueue, None),
            (release, HeldObject::TrainJob, Mode::Plain, None),
            (open.clone(), HeldObject::TrainJob, Mode::Kueue, None),
            (open, HeldObject::TrainJob, Mode::Plain, None),
        ];
        for (call, target, mode, want) in rows {
            assert_eq!(
                marks_first(&call, target, mode),
                want,
                "{call:?} on {target:?} in {mode}"
            );
        }
    }

    #[test]
    fn a_stale_write_is_decided_again_on_a_fresh_read_and_a_lost_answer_settled_by_reading() {
        let rows = [
            (WriteAnswer::Conflict, AfterWrite::ReadAgain),
            (WriteAnswer::Gone, AfterWrite::ReadAgain),
            (WriteAnswer::Lost, AfterWrite::PauseAndReadAgain),
            (WriteAnswer::PastDeadline, AfterWrite::DeadlinePassed),
            (WriteAnswer::Refused, AfterWrite::Fail),
        ];
        for (answer, want) in rows {
            assert_eq!(after_write(answer), want, "{answer:?}");
        }
    }
}
