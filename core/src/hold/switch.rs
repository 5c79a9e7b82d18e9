//! Holds across a mode switch (`helm upgrade --set mode=…`, plain ↔ kueue).
//!
//! A hold lives where the mode that placed it puts it: plain mode on the TrainJob
//! (`spec.suspend` and its `holdfast.dev/hold-*` annotations), kueue mode on the Workload
//! (`spec.active: false`, the annotations and the hold finalizer). After a switch, a hold of
//! the other mode still in force is honoured until its holder releases it: every call on the
//! job acts in the mode of that hold ([`acting_mode`]), with the same instance, so the same
//! numbered calls — and the same refusals of stale ones — go on across the switch. The webhook
//! keeps the job stopped meanwhile (`holdfast_core::policy`). Once the carried hold is
//! released, the job's next hold is the configured mode's.
//!
//! One difference: in kueue mode a TrainJob's `spec.suspend` is Kueue's, so a plain-mode hold
//! carried into kueue mode is released by removing its marks only ([`carried_write`]); Kueue
//! then admits the job through the readmission gate (which waits for the last pod and raises
//! A) and unsuspends it. A carried kueue-mode hold released in plain mode re-activates the
//! Workload, as in kueue mode; Kueue starts the job if it is queued.

use serde_json::Value;

use super::{Outcome, Write, object};
use crate::{mode::Mode, names::ANN_ATTEMPT};

/// The mode a call on a job acts in: the other mode's when a hold of the other mode is in
/// force on the job (kueue mode: on the TrainJob itself; plain mode: on its Workload), the
/// configured one otherwise. An unreadable hold counts as in force: a call then fails as
/// stale rather than act past it.
pub fn acting_mode(configured: Mode, trainjob: &Value, workload: Option<&Value>) -> Mode {
    match configured {
        Mode::Kueue if object::hold_state(trainjob).is_held() => Mode::Plain,
        Mode::Plain if workload.is_some_and(|w| object::hold_state(w).is_held()) => Mode::Kueue,
        configured => configured,
    }
}

/// `write`, decided in the `acting` mode, as it may be made in the `configured` one. A
/// plain-mode write carried into kueue mode leaves `spec.suspend` to Kueue (the one writer
/// of it there) and A to the readmission gate, which raises it when Kueue admits the job;
/// the outcome keeps saying whether the job may now run (`resumed`), not who starts it.
pub fn carried_write(mut write: Write, configured: Mode, acting: Mode) -> Write {
    if configured == Mode::Kueue && acting == Mode::Plain {
        write.stop = None;
        write.set_annotations.remove(ANN_ATTEMPT);
        if let Outcome::Opened { .. } = write.outcome {
            write.outcome = Outcome::Opened { started: false };
        }
    }
    write
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::{Call, HeldObject, HeldView, apply, decide};
    use crate::names::{ANN_HOLD_INSTANCE, ANN_OPENED};
    use serde_json::json;

    fn held(rv: &str, instance: &str) -> Value {
        json!({"metadata": {"resourceVersion": rv, "uid": "u-1",
            "annotations": {ANN_HOLD_INSTANCE: instance, ANN_OPENED: "true", ANN_ATTEMPT: "1"}},
            "spec": {"suspend": true, "active": false}})
    }

    fn free(rv: &str) -> Value {
        json!({"metadata": {"resourceVersion": rv, "uid": "u-1",
            "annotations": {ANN_OPENED: "true", ANN_ATTEMPT: "1"}},
            "spec": {"suspend": true}})
    }

    #[test]
    fn a_hold_of_the_other_mode_sets_the_mode_calls_act_in() {
        assert_eq!(acting_mode(Mode::Kueue, &held("1", "3"), None), Mode::Plain);
        assert_eq!(
            acting_mode(Mode::Kueue, &held("1", "x"), Some(&free("2"))),
            Mode::Plain,
            "an unreadable hold counts"
        );
        assert_eq!(acting_mode(Mode::Kueue, &free("1"), None), Mode::Kueue);
        assert_eq!(
            acting_mode(Mode::Plain, &free("1"), Some(&held("2", "4"))),
            Mode::Kueue
        );
        assert_eq!(
            acting_mode(Mode::Plain, &free("1"), Some(&free("2"))),
            Mode::Plain
        );
        assert_eq!(acting_mode(Mode::Plain, &free("1"), None), Mode::Plain);
    }

    #[test]
    fn a_plain_hold_released_in_kueue_mode_removes_its_marks_and_leaves_suspend_to_kueue() {
        let tj = held("7", "3");
        let release = Call::Release {
            instance: 3,
            by: crate::hold::CallerId::new("dispatch"),
        };
        let view = HeldView::read(&release, Mode::Plain, &tj, None, false).expect("view");
        let crate::hold::Decision::Write(w) = decide(&release, &view, None) else {
            panic!("a write");
        };
        assert_eq!(w.stop, Some(false), "plain mode would unsuspend");
        let w = carried_write(w, Mode::Kueue, Mode::Plain);
        assert_eq!(w.stop, None);
        assert_eq!(w.target, HeldObject::TrainJob);
        assert!(
            !w.set_annotations.contains_key(ANN_ATTEMPT),
            "the gate raises A"
        );
        assert_eq!(w.outcome, Outcome::Released { resumed: true });
        let mut obj = tj.clone();
        apply(&w, &mut obj, Mode::Kueue).expect("a kueue-mode write");
        assert_eq!(obj["spec"]["suspend"], true);
        assert_eq!(object::hold_state(&obj), crate::hold::HoldState::Absent);
        assert_eq!(obj["metadata"]["annotations"][ANN_ATTEMPT], "1");
        // A stale instance is refused as ever.
        let stale = Call::Release {
            instance: 2,
            by: crate::hold::CallerId::new("dispatch"),
        };
        let view = HeldView::read(&stale, Mode::Plain, &tj, None, false).expect("view");
        assert!(matches!(
            decide(&stale, &view, None),
            crate::hold::Decision::Fail(e) if e.cause() == Some(crate::hold::RejectCause::StaleHold)
        ));
    }

    #[test]
    fn writes_in_the_configured_mode_are_left_alone() {
        let mut w = Write::new(HeldObject::TrainJob, "1", Outcome::Opened { started: true });
        w.stop = Some(false);
        w.set_annotations.insert(ANN_ATTEMPT.into(), "2".into());
        for mode in [Mode::Plain, Mode::Kueue] {
            assert_eq!(carried_write(w.clone(), mode, mode), w);
        }
        assert_eq!(carried_write(w.clone(), Mode::Plain, Mode::Kueue), w);
        let carried = carried_write(w, Mode::Kueue, Mode::Plain);
        assert_eq!(carried.outcome, Outcome::Opened { started: false });
        assert_eq!(carried.stop, None);
    }
}
