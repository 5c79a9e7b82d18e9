//! Kueue mode: the start gate of a managed TrainJob holds against Kueue too. A job labelled
//! managed after its readmission check turned `Ready` (while it was unmanaged) is admitted by
//! Kueue on that check; Kueue's unsuspend of it is refused until Open writes the mark.

use super::mark_tests::judge;
use crate::mode::Mode;
use crate::names::{ANN_OPENED, LABEL_MANAGED, QUEUE_NAME_LABEL};
use crate::policy::Verdict;
use crate::policy::testkit::*;

const QUEUED: (&str, &str) = (QUEUE_NAME_LABEL, "team-queue");
const MANAGED: (&str, &str) = (LABEL_MANAGED, "true");
const UNMANAGED: (&str, &str) = (LABEL_MANAGED, "false");
const OPENED: (&str, &str) = (ANN_OPENED, "2026-12-05T00:00:00Z");

type Labels = &'static [(&'static str, &'static str)];
type Annotations = &'static [(&'static str, &'static str)];

/// One row per (labels before, labels after, annotations before, suspend before, after):
/// whether Kueue's write is allowed in kueue mode. Only an unsuspend of a job managed before
/// or by the write, whose stored version has no opened mark, is refused.
#[test]
fn kueue_does_not_unsuspend_a_managed_trainjob_whose_start_gate_is_closed() {
    let rows: [(Labels, Labels, Annotations, bool, bool, bool); 8] = [
        (
            &[QUEUED, MANAGED],
            &[QUEUED, MANAGED],
            &[],
            true,
            false,
            false,
        ),
        (&[QUEUED], &[QUEUED, MANAGED], &[], true, false, false),
        (&[QUEUED, MANAGED], &[QUEUED], &[], true, false, false),
        (
            &[QUEUED, UNMANAGED],
            &[QUEUED, UNMANAGED],
            &[],
            true,
            false,
            true,
        ),
        (&[QUEUED], &[QUEUED], &[], true, false, true),
        (
            &[QUEUED, MANAGED],
            &[QUEUED, MANAGED],
            &[OPENED],
            true,
            false,
            true,
        ),
        (
            &[QUEUED, MANAGED],
            &[QUEUED, MANAGED],
            &[],
            false,
            true,
            true,
        ),
        (
            &[QUEUED, MANAGED],
            &[QUEUED, MANAGED],
            &[],
            true,
            true,
            true,
        ),
    ];
    for (before, after, annotations, suspended, suspends_after, allowed) in rows {
        let old = tj(annotations, before, Some(suspended));
        let new = tj(annotations, after, Some(suspends_after));
        let v = judge(KUEUE, Mode::Kueue, &old, &new);
        assert_eq!(
            v.is_allowed(),
            allowed,
            "{before:?}->{after:?} {annotations:?} {suspended}->{suspends_after}: {v:?}"
        );
        if let Verdict::Deny { field, message, .. } = v {
            assert_eq!(field, "spec.suspend");
            assert!(
                message.contains(ANN_OPENED) && message.contains("Kueue included"),
                "{message}"
            );
        }
    }
}
