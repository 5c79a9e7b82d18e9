//! Kueue mode: the hold mark on the TrainJob ([`ANN_HOLD_MARK`]), and when it is written and
//! removed.
//!
//! A kueue-mode hold lives on the Workload. Kueue unsuspends a TrainJob from its cache, and
//! the webhook, admitting that write, reads the job's Workloads: a Hold whose Workload
//! update lands between that read and the apiserver storing the unsuspend is not seen, and
//! the held job's pods would start until Kueue's eviction suspends it again. The apiserver
//! runs validating admission inside its optimistic-concurrency loop: it stores an update
//! only on the stored version admission judged (`oldObject`), and judges again on a
//! conflict. So Hold first marks the TrainJob itself (preconditioned), then makes the seed's
//! one update of the Workload, and the webhook refuses an unsuspend of a TrainJob whose
//! stored version carries the mark: no unsuspend judged before the mark can be stored after
//! it, and every one judged after is refused.
//!
//! The mark names the instance and the latest deadline of every Hold call that wrote it: no
//! request of those calls is sent after it, and none already on the wire commits later than
//! it plus the CallBound. Release removes the mark after its Workload update; a mark left by
//! a call that crashed or ran out of time between its two writes is removed by the
//! controller's sweep ([`stale`]) once no call that wrote it can still write the Workload.
//! Pure: `now` and the bound are passed in.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;

use super::object::{annotation, resource_version};
use super::{HeldObject, HoldError, Outcome, Write, parse_decimal};
use crate::names::ANN_HOLD_MARK;

/// A hold mark as written: `instance=3 deadline=2026-12-05T00:10:00Z`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The hold instance of the latest Hold call that wrote it.
    pub instance: u64,
    /// The latest deadline of the Hold calls that wrote it.
    pub deadline: Timestamp,
}

/// The mark a TrainJob carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Marked {
    None,
    Mark(Mark),
    /// Present but not as holdfast writes it: it still refuses unsuspends (its presence is
    /// what the webhook reads); Hold replaces it, Release and the sweep remove it.
    Unreadable(String),
}

impl Mark {
    /// The annotation's value.
    pub fn render(&self) -> String {
        format!(
            "instance={} deadline={}",
            self.instance,
            crate::rfc3339::shortest(self.deadline)
        )
    }

    /// Parses [`Mark::render`]'s form; `None` for anything else.
    pub fn parse(value: &str) -> Option<Mark> {
        let (mut instance, mut deadline) = (None, None);
        for field in value.split_whitespace() {
            match field.split_once('=')? {
                ("instance", v) if instance.is_none() => instance = Some(parse_decimal(v)?),
                ("deadline", v) if deadline.is_none() => {
                    deadline = Some(crate::rfc3339::parse(v).ok()?);
                }
                _ => return None,
            }
        }
        Some(Mark {
            instance: instance?,
            deadline: deadline?,
        })
    }

    /// Whether every call that wrote this mark has ended for good at `now`: past the latest
    /// deadline plus the CallBound, no request of theirs can still commit.
    pub fn expired(&self, now: Timestamp, bound: Duration) -> bool {
        let bound = jiff::SignedDuration::try_from(bound).unwrap_or(jiff::SignedDuration::MAX);
        match self.deadline.checked_add(bound) {
            Ok(end) => now > end,
            Err(_) => false,
        }
    }
}

impl Marked {
    /// The mark `trainjob` carries.
    pub fn read(trainjob: &Value) -> Marked {
        match annotation(trainjob, ANN_HOLD_MARK) {
            None => Marked::None,
            Some(v) => {
                Mark::parse(v).map_or_else(|| Marked::Unreadable(v.to_owned()), Marked::Mark)
            }
        }
    }
}

/// What Hold does with the TrainJob's mark before it updates the Workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkStep {
    /// The mark already covers this call (same instance, a deadline at least as late, or a
    /// newer instance whose call may still write): go on to the Workload.
    Covered,
    /// Write this (preconditioned on the TrainJob's read), then go on to the Workload.
    Write(Write),
    /// The TrainJob cannot be marked (its read has no resourceVersion).
    Fail(HoldError),
}

/// Hold(`instance`, `deadline`) on a TrainJob read as `trainjob`, at `now`, with the
/// CallBound `bound`.
///
/// - no mark, or one that is unreadable: mark this call;
/// - a mark of an older instance: replace it, keeping the later of the two deadlines, so
///   the mark outlives every call that wrote it;
/// - the same instance: covered when its deadline is at least this call's, else extended;
/// - a newer instance whose calls may still write (not [`Mark::expired`]): covered — it
///   already keeps every unsuspend out, and what is in force on the Workload decides the
///   answer by the seed's rules (a newer hold only in flight is not one in force: answering
///   `StaleHold` for it would not be true); an expired one is replaced.
pub fn for_hold(
    trainjob: &Value,
    instance: u64,
    deadline: Timestamp,
    now: Timestamp,
    bound: Duration,
) -> MarkStep {
    let mark = |deadline| Mark { instance, deadline };
    let next = match Marked::read(trainjob) {
        Marked::None | Marked::Unreadable(_) => mark(deadline),
        Marked::Mark(m) if m.instance == instance && m.deadline >= deadline => {
            return MarkStep::Covered;
        }
        Marked::Mark(m) if m.instance <= instance => mark(m.deadline.max(deadline)),
        Marked::Mark(m) if !m.expired(now, bound) => return MarkStep::Covered,
        Marked::Mark(_) => mark(deadline),
    };
    let Some(rv) = resource_version(trainjob) else {
        return MarkStep::Fail(HoldError::invalid(
            "the TrainJob read has no resourceVersion to precondition its mark on",
        ));
    };
    let mut write = Write::new(HeldObject::TrainJob, rv, Outcome::Held);
    write.set(ANN_HOLD_MARK, next.render());
    MarkStep::Write(write)
}

/// Release(`instance`), after its Workload update: whether the mark goes, and the write
/// that removes it (preconditioned on the TrainJob's read). `released`: the Workload update
/// landed (or hold `instance` was found lifted already).
///
/// - the same instance, released: removed;
/// - otherwise as the sweep decides ([`stale`]): removed once no call that wrote it can
///   still write and the Workload holds no hold at all; a mark of a newer instance whose
///   call may still be writing always stays.
pub fn after_release(
    trainjob: &Value,
    instance: u64,
    released: bool,
    workload_hold: Option<u64>,
    now: Timestamp,
    bound: Duration,
) -> Option<Write> {
    let remove = match Marked::read(trainjob) {
        Marked::None => false,
        Marked::Mark(m) if released && m.instance == instance => true,
        marked => is_stale(&marked, workload_hold, now, bound),
    };
    remove.then(|| removal(trainjob)).flatten()
}

/// The sweep: the write that removes `trainjob`'s mark when it is stale, or `None`.
///
/// Stale: every Hold call that wrote it has ended for good ([`Mark::expired`]) and the
/// Workload (`workload_hold`: the instance its hold in force names, if any) holds no hold.
/// A mark kept while another instance is in force still keeps that hold's unsuspends out (a
/// Hold under a newer live mark writes none of its own). An unreadable mark is stale unless
/// the Workload is held.
/// Preconditioned on the TrainJob's read: a Hold that marks it again in between makes the
/// removal fail.
pub fn stale(
    trainjob: &Value,
    workload_hold: Option<u64>,
    now: Timestamp,
    bound: Duration,
) -> Option<Write> {
    is_stale(&Marked::read(trainjob), workload_hold, now, bound)
        .then(|| removal(trainjob))
        .flatten()
}

fn is_stale(marked: &Marked, workload_hold: Option<u64>, now: Timestamp, bound: Duration) -> bool {
    match marked {
        Marked::None => false,
        Marked::Unreadable(_) => workload_hold.is_none(),
        Marked::Mark(m) => m.expired(now, bound) && workload_hold.is_none(),
    }
}

fn removal(trainjob: &Value) -> Option<Write> {
    let rv = resource_version(trainjob)?;
    let mut write = Write::new(
        HeldObject::TrainJob,
        rv,
        Outcome::Released { resumed: false },
    );
    write.remove(ANN_HOLD_MARK);
    Some(write)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BOUND: Duration = Duration::from_secs(66);

    fn t(s: &str) -> Timestamp {
        crate::rfc3339::parse(s).expect("timestamp")
    }

    fn job(mark: Option<&str>) -> Value {
        let mut annotations = serde_json::Map::new();
        if let Some(m) = mark {
            annotations.insert(ANN_HOLD_MARK.into(), m.into());
        }
        json!({"metadata": {"name": "job", "resourceVersion": "7", "annotations": annotations}})
    }

    fn written(step: &MarkStep) -> Option<(String, String)> {
        match step {
            MarkStep::Write(w) => Some((
                w.precondition.clone(),
                w.set_annotations.get(ANN_HOLD_MARK)?.clone(),
            )),
            _ => None,
        }
    }

    #[test]
    fn the_mark_reads_back_what_is_written_and_nothing_else() {
        let m = Mark {
            instance: 3,
            deadline: t("2026-12-05T00:10:00Z"),
        };
        assert_eq!(m.render(), "instance=3 deadline=2026-12-05T00:10:00Z");
        assert_eq!(Mark::parse(&m.render()), Some(m));
        let half = Mark {
            instance: 3,
            deadline: t("2026-12-05T00:10:00.5Z"),
        };
        assert_eq!(half.render(), "instance=3 deadline=2026-12-05T00:10:00.5Z");
        assert_eq!(Mark::parse(&half.render()), Some(half));
        for bad in [
            "",
            "3",
            "instance=3",
            "deadline=2026-12-05T00:10:00Z",
            "instance=-1 deadline=2026-12-05T00:10:00Z",
            "instance=3 deadline=soon",
            "instance=3 instance=4 deadline=2026-12-05T00:10:00Z",
            "instance=3 deadline=2026-12-05T00:10:00Z extra=1",
            // RFC 3339 only, as the module reads it: not jiff's looser forms.
            "instance=3 deadline=2026-12-05T00:10:00Z[UTC]",
            "instance=3 deadline=2026-12-05T00:10:00+0100",
            "instance=3 deadline=2026-12-05T00:10Z",
        ] {
            assert_eq!(Mark::parse(bad), None, "{bad:?}");
        }
        assert_eq!(Marked::read(&job(None)), Marked::None);
        assert_eq!(
            Marked::read(&job(Some("x"))),
            Marked::Unreadable("x".into())
        );
    }

    #[test]
    fn a_mark_expires_only_after_its_deadline_plus_the_bound() {
        let m = Mark {
            instance: 1,
            deadline: t("2026-12-05T00:00:00Z"),
        };
        assert!(!m.expired(t("2026-12-05T00:00:00Z"), BOUND));
        assert!(!m.expired(t("2026-12-05T00:01:06Z"), BOUND));
        assert!(m.expired(t("2026-12-05T00:01:06.001Z"), BOUND));
        assert!(!m.expired(t("2026-12-05T00:00:00Z"), Duration::MAX));
    }

    /// Hold's step, one row per kind of mark found.
    #[test]
    fn hold_marks_the_trainjob_first() {
        let d = t("2026-12-05T00:10:00Z");
        let now = t("2026-12-05T00:09:00Z");
        let long_ago = t("2026-12-04T00:00:00Z");
        let mark = |i: u64, d: &str| format!("instance={i} deadline={d}");
        let rows: [(&str, Option<String>, Option<&str>); 8] = [
            (
                "no mark",
                None,
                Some("instance=5 deadline=2026-12-05T00:10:00Z"),
            ),
            (
                "unreadable",
                Some("x".into()),
                Some("instance=5 deadline=2026-12-05T00:10:00Z"),
            ),
            (
                "older instance, later deadline kept",
                Some(mark(4, "2026-12-05T00:20:00Z")),
                Some("instance=5 deadline=2026-12-05T00:20:00Z"),
            ),
            (
                "older instance, earlier deadline",
                Some(mark(4, "2026-12-05T00:05:00Z")),
                Some("instance=5 deadline=2026-12-05T00:10:00Z"),
            ),
            (
                "same instance, as late",
                Some(mark(5, "2026-12-05T00:10:00Z")),
                None,
            ),
            (
                "same instance, earlier deadline: extended",
                Some(mark(5, "2026-12-05T00:01:00Z")),
                Some("instance=5 deadline=2026-12-05T00:10:00Z"),
            ),
            (
                "newer instance, may still write",
                Some(mark(6, "2026-12-05T00:08:30Z")),
                None,
            ),
            (
                "newer instance, expired",
                Some(mark(6, &long_ago.to_string())),
                Some("instance=5 deadline=2026-12-05T00:10:00Z"),
            ),
        ];
        for (what, found, want) in rows {
            let step = for_hold(&job(found.as_deref()), 5, d, now, BOUND);
            assert_eq!(
                written(&step).map(|(_, v)| v),
                want.map(str::to_owned),
                "{what}: {step:?}"
            );
            if let Some((rv, _)) = written(&step) {
                assert_eq!(rv, "7", "{what}: preconditioned on the read");
            }
        }
        assert_eq!(
            for_hold(
                &job(Some(&mark(5, "2026-12-05T00:10:00Z"))),
                5,
                d,
                now,
                BOUND
            ),
            MarkStep::Covered
        );
        // A newer Hold still placing its hold covers this one: the Workload decides.
        assert_eq!(
            for_hold(
                &job(Some(&mark(6, "2026-12-05T00:08:30Z"))),
                5,
                d,
                now,
                BOUND,
            ),
            MarkStep::Covered
        );
        let no_rv = json!({"metadata": {"name": "job"}});
        assert!(matches!(
            for_hold(&no_rv, 5, d, now, BOUND),
            MarkStep::Fail(_)
        ));
    }

    /// (what, mark, released, Workload's hold, Release removes, the sweep removes)
    type Row = (
        &'static str,
        Option<&'static str>,
        bool,
        Option<u64>,
        bool,
        bool,
    );

    /// Release's step and the sweep, one row per case: whether the mark goes.
    #[test]
    fn release_and_the_sweep_remove_a_mark_only_when_no_call_can_still_write() {
        let live = "instance=5 deadline=2026-12-05T00:10:00Z";
        let newer_live = "instance=6 deadline=2026-12-05T00:10:00Z";
        let dead = "instance=5 deadline=2026-12-04T00:00:00Z";
        let now = t("2026-12-05T00:09:00Z");
        let rows: [Row; 10] = [
            ("no mark", None, true, None, false, false),
            (
                "own instance, released",
                Some(live),
                true,
                None,
                true,
                false,
            ),
            (
                "own instance, not released, live",
                Some(live),
                false,
                Some(5),
                false,
                false,
            ),
            (
                "own instance, not released, Workload free, live",
                Some(live),
                false,
                None,
                false,
                false,
            ),
            (
                "a newer Hold still placing",
                Some(newer_live),
                true,
                None,
                false,
                false,
            ),
            (
                "expired, Workload free",
                Some(dead),
                false,
                None,
                true,
                true,
            ),
            (
                "expired, Workload holds it",
                Some(dead),
                false,
                Some(5),
                false,
                false,
            ),
            (
                "expired, Workload holds another: kept, it guards that hold",
                Some(dead),
                false,
                Some(4),
                false,
                false,
            ),
            (
                "unreadable, Workload free",
                Some("x"),
                false,
                None,
                true,
                true,
            ),
            (
                "unreadable, Workload held",
                Some("x"),
                false,
                Some(5),
                false,
                false,
            ),
        ];
        for (what, mark, released, held, by_release, by_sweep) in rows {
            let tj = job(mark);
            let release = after_release(&tj, 5, released, held, now, BOUND);
            assert_eq!(release.is_some(), by_release, "Release: {what}");
            assert_eq!(
                stale(&tj, held, now, BOUND).is_some(),
                by_sweep,
                "sweep: {what}"
            );
            for w in [release, stale(&tj, held, now, BOUND)]
                .into_iter()
                .flatten()
            {
                assert_eq!(w.precondition, "7", "{what}");
                assert!(w.remove_annotations.contains(ANN_HOLD_MARK), "{what}");
                assert_eq!(w.stop, None, "{what}: never spec.suspend");
            }
        }
    }
}
