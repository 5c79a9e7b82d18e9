//! The Event a hold call leaves on its TrainJob: placed, released, start gate opened, or
//! refused with its cause. Always on the TrainJob, in Kueue mode too (where Hold and Release
//! write the Workload): that is where `kubectl describe trainjob` looks.
//!
//! The note holds only what the call was asked and what it answered (instance, reason,
//! cause), so the same call made again — a dispatch retry, an idempotent repeat — is the
//! same Event, counted in its series, not a new object.

use holdfast_core::hold::{CallKind, CallMeta, HoldError, Outcome};
use holdfast_core::mode::Mode;

use crate::events::Notice;

/// What a call saw of the cluster, for its Event.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen<'a> {
    /// The Kueue Workload the call read (Kueue mode).
    pub workload: Option<&'a str>,
    /// The pods of the earlier execution that remained (a Release or Open refused).
    pub pods: &'a [String],
    /// The holder whose hold the call overrode (its caller may override).
    pub overrode: Option<&'a str>,
}

/// The Event for a call of `kind` with `meta` that ended in `result`.
pub fn notice(
    kind: CallKind,
    meta: &CallMeta,
    mode: Mode,
    seen: Seen<'_>,
    result: &Result<Outcome, HoldError>,
) -> Notice {
    let action = action(kind);
    let instance = meta
        .instance
        .map(|i| format!(" {i}"))
        .filter(|_| kind != CallKind::Open)
        .unwrap_or_default();
    let because = meta
        .reason
        .as_deref()
        .filter(|_| kind == CallKind::Hold)
        // Refused at the API; escaped here too, for a caller of the executor itself.
        .map(|r| format!(" (reason: {})", holdfast_core::hold::printable(r)))
        .unwrap_or_default();
    let workload = seen.workload.unwrap_or("(none)");
    let overrode = seen
        .overrode
        .map(|h| {
            format!(
                " It overrode the hold of {}.",
                holdfast_core::hold::printable(h)
            )
        })
        .unwrap_or_default();
    match result {
        Ok(Outcome::Held | Outcome::AlreadyInForce) => {
            let how = match mode {
                Mode::Plain => "spec.suspend is true".to_owned(),
                Mode::Kueue => format!(
                    "its Workload {workload} is deactivated (spec.active=false); Kueue evicts it and suspends the TrainJob"
                ),
            };
            Notice::normal(
                "HoldPlaced",
                action,
                format!("Hold{instance} is in force{because}: {how}.{overrode}"),
            )
        }
        Ok(Outcome::Released { resumed }) => {
            let what = match (mode, resumed) {
                (Mode::Plain, true) => "the TrainJob resumes".to_owned(),
                (Mode::Kueue, true) => format!(
                    "its Workload {workload} is active again; the next execution waits for Kueue's admission and the readmission gate"
                ),
                (_, false) => {
                    "the hold had not stopped the TrainJob (never started, ended, or stopped by another), so it stays as it is".to_owned()
                }
            };
            Notice::normal(
                "HoldReleased",
                action,
                format!("Hold{instance} released: {what}.{overrode}"),
            )
        }
        Ok(Outcome::Opened { started }) => {
            let what = match (mode, started) {
                (Mode::Plain, true) => "the TrainJob starts",
                (Mode::Kueue, _) => "Kueue's admission and the readmission gate start it",
                (Mode::Plain, false) => {
                    "it starts when the hold in force is released (or it has ended)"
                }
            };
            Notice::normal(
                "StartGateOpened",
                action,
                format!("Start gate opened: {what}."),
            )
        }
        Ok(Outcome::AlreadyOpen) => Notice::normal(
            "StartGateOpened",
            action,
            "Start gate opened: it was open already.",
        ),
        Err(e @ HoldError::Unknown { .. }) => Notice::warning(
            unknown_reason(kind),
            action,
            format!("{}{instance}: {e}", title(kind)),
        ),
        Err(e) => {
            let body = e.body();
            let cause = match body.cause {
                Some(c) => format!("{} ({c})", body.error),
                None => body.error,
            };
            let pods = match e {
                HoldError::PodsRemain if !seen.pods.is_empty() => {
                    format!(": {}", crate::pods::listed(seen.pods))
                }
                _ => String::new(),
            };
            Notice::warning(
                refused_reason(kind),
                action,
                format!(
                    "{}{instance} refused: {cause}: {}{pods}",
                    title(kind),
                    body.message
                ),
            )
        }
    }
}

fn action(kind: CallKind) -> &'static str {
    title(kind)
}

fn title(kind: CallKind) -> &'static str {
    match kind {
        CallKind::Hold => "Hold",
        CallKind::Release => "Release",
        CallKind::Open => "Open",
    }
}

fn refused_reason(kind: CallKind) -> &'static str {
    match kind {
        CallKind::Hold => "HoldRefused",
        CallKind::Release => "ReleaseRefused",
        CallKind::Open => "OpenRefused",
    }
}

fn unknown_reason(kind: CallKind) -> &'static str {
    match kind {
        CallKind::Hold => "HoldOutcomeUnknown",
        CallKind::Release => "ReleaseOutcomeUnknown",
        CallKind::Open => "OpenOutcomeUnknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Severity;
    use holdfast_core::hold::RejectCause;
    use jiff::Timestamp;

    fn meta(instance: Option<u64>, reason: Option<&str>) -> CallMeta {
        CallMeta {
            instance,
            deadline: Timestamp::MAX,
            reason: reason.map(str::to_owned),
        }
    }

    #[test]
    fn a_placed_hold_names_its_instance_reason_and_in_kueue_mode_the_workload() {
        let m = meta(Some(3), Some("node lost"));
        let n = notice(
            CallKind::Hold,
            &m,
            Mode::Plain,
            Seen::default(),
            &Ok(Outcome::Held),
        );
        assert_eq!(
            (n.severity, n.reason, n.action),
            (Severity::Normal, "HoldPlaced", "Hold")
        );
        assert_eq!(
            n.note,
            "Hold 3 is in force (reason: node lost): spec.suspend is true."
        );
        let again = notice(
            CallKind::Hold,
            &m,
            Mode::Plain,
            Seen::default(),
            &Ok(Outcome::AlreadyInForce),
        );
        assert_eq!(
            again, n,
            "a repeat is the same Event (counted in its series)"
        );
        let k = notice(
            CallKind::Hold,
            &m,
            Mode::Kueue,
            Seen {
                workload: Some("trainjob-job-1"),
                pods: &[],
                overrode: None,
            },
            &Ok(Outcome::Held),
        );
        assert!(
            k.note.contains("Workload trainjob-job-1 is deactivated"),
            "{}",
            k.note
        );
    }

    #[test]
    fn an_override_names_the_holder_it_overrode_and_a_refusal_names_the_holder() {
        let m = meta(Some(3), None);
        let n = notice(
            CallKind::Release,
            &m,
            Mode::Plain,
            Seen {
                overrode: Some("system:serviceaccount:team-a:dispatch"),
                ..Seen::default()
            },
            &Ok(Outcome::Released { resumed: true }),
        );
        assert_eq!(
            n.note,
            "Hold 3 released: the TrainJob resumes. It overrode the hold of system:serviceaccount:team-a:dispatch."
        );
        let refused = notice(
            CallKind::Release,
            &m,
            Mode::Plain,
            Seen::default(),
            &Err(HoldError::not_holder(
                "hold 3 may not be released by alice: the hold in force was placed by dispatch",
            )),
        );
        assert_eq!(
            (refused.severity, refused.reason),
            (Severity::Warning, "ReleaseRefused")
        );
        assert!(
            refused.note.starts_with(
                "Release 3 refused: Rejected (NotHolder): hold 3 may not be released by alice"
            ),
            "{}",
            refused.note
        );
    }

    #[test]
    fn a_refusal_is_a_warning_naming_the_error_and_its_cause() {
        let m = meta(Some(2), None);
        let n = notice(
            CallKind::Release,
            &m,
            Mode::Plain,
            Seen::default(),
            &Err(HoldError::PodsRemain),
        );
        assert_eq!(
            (n.severity, n.reason),
            (Severity::Warning, "ReleaseRefused")
        );
        assert!(
            n.note.starts_with("Release 2 refused: PodsRemain: "),
            "{}",
            n.note
        );
        let pods = ["job-node-0-0-abc".to_owned()];
        let named = notice(
            CallKind::Release,
            &m,
            Mode::Plain,
            Seen {
                workload: None,
                pods: &pods,
                overrode: None,
            },
            &Err(HoldError::PodsRemain),
        );
        assert!(
            named
                .note
                .ends_with("nothing was written: job-node-0-0-abc"),
            "{}",
            named.note
        );
        let stale = notice(
            CallKind::Release,
            &m,
            Mode::Plain,
            Seen::default(),
            &Err(HoldError::stale("hold 3 is in force")),
        );
        assert_eq!(
            stale.note,
            "Release 2 refused: Rejected (StaleHold): hold 3 is in force"
        );
        assert_eq!(HoldError::stale("x").cause(), Some(RejectCause::StaleHold));
        let conflict = notice(
            CallKind::Hold,
            &m,
            Mode::Plain,
            Seen::default(),
            &Err(HoldError::Conflict { tries: 8 }),
        );
        assert!(
            conflict.note.starts_with("Hold 2 refused: Conflict: "),
            "{}",
            conflict.note
        );
        let unsupported = notice(
            CallKind::Open,
            &meta(None, None),
            Mode::Kueue,
            Seen::default(),
            &Err(HoldError::unsupported("no gate")),
        );
        assert_eq!(unsupported.reason, "OpenRefused");
        assert_eq!(unsupported.note, "Open refused: Unsupported: no gate");
    }

    #[test]
    fn an_unknown_outcome_is_its_own_warning_and_open_names_no_instance() {
        let n = notice(
            CallKind::Hold,
            &meta(Some(4), None),
            Mode::Plain,
            Seen::default(),
            &Err(HoldError::unknown("answer lost")),
        );
        assert_eq!(n.reason, "HoldOutcomeUnknown");
        let open = notice(
            CallKind::Open,
            &meta(Some(9), None),
            Mode::Plain,
            Seen::default(),
            &Ok(Outcome::Opened { started: true }),
        );
        assert_eq!(open.note, "Start gate opened: the TrainJob starts.");
    }
}
