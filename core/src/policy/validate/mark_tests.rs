//! The hold mark on a TrainJob (`holdfast.dev/hold-mark`): an unsuspend judged on a marked
//! stored version is refused in kueue mode, whoever sends it, Kueue included.

use super::validate;
use crate::mode::Mode;
use crate::names::{ANN_HOLD_MARK, QUEUE_NAME_LABEL};
use crate::policy::testkit::*;
use crate::policy::{Operation, Resource, Verdict};
use serde_json::Value;

const MARK: (&str, &str) = (ANN_HOLD_MARK, "instance=4 deadline=2026-12-05T00:10:00Z");
const QUEUED: (&str, &str) = (QUEUE_NAME_LABEL, "team-queue");

/// The verdict on `user`'s update of TrainJob `old` to `new` in `mode`.
pub(super) fn judge(user: &str, mode: Mode, old: &Value, new: &Value) -> Verdict {
    validate(
        &input(
            Resource::TrainJob,
            Operation::Update,
            user,
            Some(old),
            Some(new),
        ),
        &who(),
        mode,
    )
}

/// (annotations, suspend before, suspend after, allowed)
type Row = (
    &'static [(&'static str, &'static str)],
    Option<bool>,
    Option<bool>,
    bool,
);

/// One row per (mark on the stored version, suspend before, suspend after): whether Kueue's
/// write passes the mark rule in kueue mode. Only an unsuspend of a marked job is refused.
#[test]
fn an_unsuspend_judged_on_a_marked_trainjob_is_refused_even_for_kueue() {
    let rows: [Row; 6] = [
        (&[MARK], Some(true), Some(false), false),
        (&[MARK], Some(true), None, false),
        (&[MARK], Some(false), Some(true), true),
        (&[MARK], Some(true), Some(true), true),
        (&[], Some(true), Some(false), true),
        (
            &[(ANN_HOLD_MARK, "garbage")],
            Some(true),
            Some(false),
            false,
        ),
    ];
    for (marks, before, after, allowed) in rows {
        let old = tj(marks, &[QUEUED], before);
        let new = tj(marks, &[QUEUED], after);
        let v = judge(KUEUE, Mode::Kueue, &old, &new);
        assert_eq!(
            v.is_allowed(),
            allowed,
            "{marks:?} {before:?}->{after:?}: {v:?}"
        );
        if let Verdict::Deny { field, message, .. } = v {
            assert_eq!(field, "spec.suspend");
            assert!(message.contains(ANN_HOLD_MARK), "{message}");
            assert!(message.contains(KUEUE), "{message}");
        }
    }
    // The message names the hold's instance.
    let old = tj(&[MARK], &[QUEUED], Some(true));
    let new = tj(&[MARK], &[QUEUED], Some(false));
    match judge(KUEUE, Mode::Kueue, &old, &new) {
        Verdict::Deny { message, .. } => assert!(message.contains("hold 4"), "{message}"),
        Verdict::Allow => panic!("allowed"),
    }
}

/// Kueue mode: nobody unsuspends a marked TrainJob (alice and the controller are refused
/// by the rule that makes `spec.suspend` Kueue's, Kueue by the mark). Plain mode: the mark
/// is inert (the Workload lookup honours a hold left from kueue mode). The mark on the new
/// object alone (not stored yet) decides nothing.
#[test]
fn a_marked_trainjob_is_unsuspended_by_nobody_in_kueue_mode() {
    let old = tj(&[MARK], &[QUEUED], Some(true));
    let new = tj(&[MARK], &[QUEUED], Some(false));
    for user in EVERYONE {
        let verdict = judge(user, Mode::Kueue, &old, &new);
        assert!(!verdict.is_allowed(), "{user}: {verdict:?}");
    }
    for user in [ALICE, KUEUE, CONTROLLER] {
        let verdict = judge(user, Mode::Plain, &old, &new);
        assert!(verdict.is_allowed(), "plain mode, {user}: {verdict:?}");
    }
    let unmarked = tj(&[], &[QUEUED], Some(true));
    let verdict = judge(KUEUE, Mode::Kueue, &unmarked, &new);
    assert!(
        !matches!(&verdict, Verdict::Deny { message, .. } if message.contains("marked")),
        "{verdict:?}"
    );
}
