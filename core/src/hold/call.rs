//! The calls, as they arrive (`CallRequest`), once checked (`CallMeta`), and as the state
//! machine sees them (`Call`).

use std::{fmt, time::Duration};

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::HoldError;
use crate::mode::Mode;
use crate::rfc3339;

/// The furthest ahead a call's deadline reaches: a later one is taken as this long after the
/// call arrived. A call that waits (an `Open` for its Workload or snapshot) or retries needs
/// minutes at most, and in Kueue mode a Hold's mark on the TrainJob lasts until its deadline
/// (plus the CallBound): unclipped, a caller allowed to hold could mark a job for a century
/// and keep Kueue from ever starting it again.
pub const MAX_DEADLINE_AHEAD: std::time::Duration = std::time::Duration::from_secs(10 * 60);

/// The longest `reason` a Hold may carry, in bytes. It is stored in an annotation, and
/// annotations share a 256 KiB budget with everyone else's.
pub const MAX_REASON_BYTES: usize = 1024;

/// Whether `c` may not appear in text printed for a person (a hold's `reason`): a control
/// character (C0, DEL, C1: terminal escapes, line breaks, tabs), or a bidirectional-text
/// control (which reorders what a terminal or a browser shows). Such text could recolour a
/// terminal, move its cursor, or forge a row of a table or an Event's note.
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// The first character of `text` that is [`unprintable`]: its position, counted in
/// characters from 1, and the character.
pub fn first_unprintable(text: &str) -> Option<(usize, char)> {
    text.chars()
        .enumerate()
        .find(|(_, c)| unprintable(*c))
        .map(|(i, c)| (i + 1, c))
}

/// `text` with every [`unprintable`] character written as its Unicode escape (`\u{1b}`),
/// for printing text read from the cluster (a hold's reason, a message) where a person reads
/// it. Text without one is returned as it is.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unprintable(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Which of the hold-family calls this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallKind {
    Hold,
    Release,
    Open,
}

impl CallKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Hold => "hold",
            CallKind::Release => "release",
            CallKind::Open => "open",
        }
    }

    /// The object a call of this kind reads and writes. Hold and Release act on the held
    /// object (the Workload in Kueue mode); Open always acts on the TrainJob, because the
    /// opened mark and A live there.
    pub fn target(self, mode: Mode) -> HeldObject {
        match (self, mode) {
            (CallKind::Open, _) | (_, Mode::Plain) => HeldObject::TrainJob,
            (CallKind::Hold | CallKind::Release, Mode::Kueue) => HeldObject::Workload,
        }
    }
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The object a call reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum HeldObject {
    /// The TrainJob: the held object in plain mode, and Open's target in both modes.
    TrainJob,
    /// The TrainJob's Kueue Workload: the held object in Kueue mode.
    Workload,
}

/// A hold-family call's body as it arrives over the API, before any check.
///
/// `{"instance":3,"deadline":"2026-11-29T12:00:00Z","reason":"node lost"}`. Unknown fields
/// are refused, so that a misspelt `deadline` is reported as such.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    #[serde(default)]
    pub instance: Option<u64>,
    /// RFC 3339.
    #[serde(default)]
    pub deadline: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

impl CallRequest {
    /// Parses an API body; any failure is `Invalid`, naming what was wrong.
    pub fn from_json(body: &[u8]) -> Result<Self, HoldError> {
        serde_json::from_slice(body).map_err(|e| HoldError::invalid(format!("request body: {e}")))
    }
}

/// A checked call: dispatch's `CallMeta`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallMeta {
    /// The hold instance; `None` for Open, which has none.
    pub instance: Option<u64>,
    /// Checked before every request to the apiserver, and the request's own deadline.
    pub deadline: Timestamp,
    pub reason: Option<String>,
}

impl CallMeta {
    /// Checks a request for a call of `kind` at time `now`.
    ///
    /// - no deadline, an unparsable one, no instance for Hold or Release, or a reason longer
    ///   than [`MAX_REASON_BYTES`] or with an [`unprintable`] character: `Invalid`;
    /// - a deadline at or before `now`: `Rejected { cause: DeadlinePassed }`.
    ///
    /// Open takes no instance: one sent anyway is ignored (a client may send its zero value).
    /// An empty reason is no reason.
    pub fn validate(
        kind: CallKind,
        req: CallRequest,
        now: Timestamp,
    ) -> Result<CallMeta, HoldError> {
        let raw = req
            .deadline
            .ok_or_else(|| HoldError::invalid(format!("{kind}: deadline is required")))?;
        let deadline = rfc3339::parse(&raw).map_err(|e| {
            HoldError::invalid(format!("{kind}: deadline {raw:?} is not RFC 3339: {e}"))
        })?;
        let deadline = jiff::SignedDuration::try_from(MAX_DEADLINE_AHEAD)
            .ok()
            .and_then(|ahead| now.checked_add(ahead).ok())
            .map_or(deadline, |furthest| deadline.min(furthest));
        let instance = match kind {
            CallKind::Open => None,
            CallKind::Hold | CallKind::Release => Some(
                req.instance
                    .ok_or_else(|| HoldError::invalid(format!("{kind}: instance is required")))?,
            ),
        };
        let reason = req.reason.filter(|r| !r.is_empty());
        if let Some(r) = &reason
            && r.len() > MAX_REASON_BYTES
        {
            return Err(HoldError::invalid(format!(
                "{kind}: reason is {} bytes, more than {MAX_REASON_BYTES}",
                r.len()
            )));
        }
        if let Some((at, c)) = reason.as_deref().and_then(first_unprintable) {
            return Err(HoldError::invalid(format!(
                "{kind}: reason: character {at} is a control character (U+{:04X}); a reason is one line of printable text (no terminal escapes, line breaks, tabs or bidirectional-text controls)",
                u32::from(c)
            )));
        }
        let meta = CallMeta {
            instance,
            deadline,
            reason,
        };
        meta.check_deadline(now)?;
        Ok(meta)
    }

    /// `Rejected { cause: DeadlinePassed }` once `now` has reached the deadline. The executor
    /// calls this immediately before it sends each request.
    pub fn check_deadline(&self, now: Timestamp) -> Result<(), HoldError> {
        self.time_left(now).map(|_| ())
    }

    /// The time left before the deadline, to be used as the next request's timeout, or
    /// `Rejected { cause: DeadlinePassed }` if there is none.
    pub fn time_left(&self, now: Timestamp) -> Result<Duration, HoldError> {
        Duration::try_from(self.deadline.duration_since(now))
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                HoldError::deadline_passed(format!(
                    "the call's deadline {} has passed (now {})",
                    rfc3339::auto(self.deadline),
                    rfc3339::auto(now),
                ))
            })
    }
}

/// Who makes a Hold or Release, as the state machine decides on it: the holder a Hold
/// records, and whether the caller may override another holder's hold.
///
/// The identity is the authenticated username (TokenReview's `user.username`), nothing else:
/// the replicas of a supervisor that share a ServiceAccount are one holder; two
/// ServiceAccounts are two holders, whatever groups they share. Groups, uid and extra never
/// make two callers the same holder.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallerId {
    /// The authenticated username; written as `holdfast.dev/hold-holder` by a Hold.
    pub username: String,
    /// The caller was found allowed to override (`create` on `holdfast.dev`
    /// `trainjobs/override` in the TrainJob's namespace): it may release, or replace with
    /// another instance, a hold another holder placed, and becomes its holder. The I/O layer
    /// asks only when a decision needs it ([`HoldError::is_not_holder`]).
    pub may_override: bool,
}

impl CallerId {
    /// `username`, not (yet) known to be allowed to override.
    pub fn new(username: impl Into<String>) -> Self {
        CallerId {
            username: username.into(),
            may_override: false,
        }
    }

    /// The same caller, allowed to override.
    pub fn overriding(self) -> Self {
        CallerId {
            may_override: true,
            ..self
        }
    }
}

/// A call as the state machine sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// Place hold `instance`.
    Hold {
        instance: u64,
        reason: Option<String>,
        /// Written as `holdfast.dev/hold-placed-at`: when the call was accepted.
        placed_at: Timestamp,
        /// Who places it: written as `holdfast.dev/hold-holder`.
        by: CallerId,
    },
    /// Lift hold `instance`, if it is the one in force.
    Release { instance: u64, by: CallerId },
    /// Open the start gate. Anyone allowed it may: it never lifts a hold.
    Open,
}

impl Call {
    /// The call `meta` describes, made `by` a caller. `now` becomes a Hold's `placed_at`.
    pub fn new(
        kind: CallKind,
        meta: &CallMeta,
        now: Timestamp,
        by: CallerId,
    ) -> Result<Call, HoldError> {
        let instance = || {
            meta.instance
                .ok_or_else(|| HoldError::invalid(format!("{kind}: instance is required")))
        };
        Ok(match kind {
            CallKind::Hold => Call::Hold {
                instance: instance()?,
                reason: meta.reason.clone(),
                placed_at: now,
                by,
            },
            CallKind::Release => Call::Release {
                instance: instance()?,
                by,
            },
            CallKind::Open => Call::Open,
        })
    }

    /// Who makes the call (Open: nobody in particular).
    pub fn by(&self) -> Option<&CallerId> {
        match self {
            Call::Hold { by, .. } | Call::Release { by, .. } => Some(by),
            Call::Open => None,
        }
    }

    /// The same call, its caller found allowed to override.
    pub fn overriding(self) -> Call {
        match self {
            Call::Hold {
                instance,
                reason,
                placed_at,
                by,
            } => Call::Hold {
                instance,
                reason,
                placed_at,
                by: by.overriding(),
            },
            Call::Release { instance, by } => Call::Release {
                instance,
                by: by.overriding(),
            },
            Call::Open => Call::Open,
        }
    }

    pub fn kind(&self) -> CallKind {
        match self {
            Call::Hold { .. } => CallKind::Hold,
            Call::Release { .. } => CallKind::Release,
            Call::Open => CallKind::Open,
        }
    }

    /// The object this call reads and writes in `mode`: see [`CallKind::target`].
    pub fn target(&self, mode: Mode) -> HeldObject {
        self.kind().target(mode)
    }
}

/// Parses and checks an API body for a call of `kind` by `by` at `now`: the whole front half
/// of a hold-family request.
pub fn parse_call(
    kind: CallKind,
    body: &[u8],
    now: Timestamp,
    by: CallerId,
) -> Result<(Call, CallMeta), HoldError> {
    let meta = CallMeta::validate(kind, CallRequest::from_json(body)?, now)?;
    let call = Call::new(kind, &meta, now, by)?;
    Ok((call, meta))
}

/// The smallest margin [`call_bound`] adds.
pub const CALL_BOUND_MIN_MARGIN: Duration = Duration::from_secs(5);

/// The `CallBound` declared to dispatch: how long after a call's deadline a request already
/// on the wire may still commit. That is the apiserver's request timeout, plus a margin for
/// clock skew and the last hop: the larger of 5 s and a tenth of the timeout.
///
/// `apiserver_request_timeout` must be at least the apiserver's `--request-timeout`; if it is
/// lower, the bound is too small.
pub fn call_bound(apiserver_request_timeout: Duration) -> Duration {
    let margin = (apiserver_request_timeout / 10).max(CALL_BOUND_MIN_MARGIN);
    apiserver_request_timeout.saturating_add(margin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hold::RejectCause;

    fn t(s: &str) -> Timestamp {
        rfc3339::parse(s).expect("test time")
    }

    fn by() -> CallerId {
        CallerId::new("system:serviceaccount:team-a:dispatch")
    }

    const NOW: &str = "2026-11-29T11:00:00Z";

    fn req(instance: Option<u64>, deadline: Option<&str>) -> CallRequest {
        CallRequest {
            instance,
            deadline: deadline.map(str::to_owned),
            reason: None,
        }
    }

    #[test]
    fn a_deadline_further_ahead_than_ten_minutes_is_clipped_to_ten_minutes() {
        let now: Timestamp = "2026-12-05T00:00:00Z".parse().expect("now");
        let call = |deadline: &str| CallRequest {
            instance: Some(1),
            deadline: Some(deadline.to_owned()),
            reason: None,
        };
        let far = CallMeta::validate(CallKind::Hold, call("9999-01-01T00:00:00Z"), now)
            .expect("a far deadline is accepted");
        assert_eq!(
            far.deadline,
            "2026-12-05T00:10:00Z".parse::<Timestamp>().expect("ts")
        );
        let near = CallMeta::validate(CallKind::Hold, call("2026-12-05T00:01:00Z"), now)
            .expect("a near deadline");
        assert_eq!(
            near.deadline,
            "2026-12-05T00:01:00Z".parse::<Timestamp>().expect("ts")
        );
    }

    #[test]
    fn call_without_deadline_is_invalid() {
        for kind in [CallKind::Hold, CallKind::Release, CallKind::Open] {
            let err = CallMeta::validate(kind, req(Some(1), None), t(NOW)).expect_err("invalid");
            assert!(
                matches!(&err, HoldError::Invalid { message } if message.contains("deadline")),
                "{kind}: {err:?}"
            );
        }
        let err =
            parse_call(CallKind::Hold, br#"{"instance":3}"#, t(NOW), by()).expect_err("invalid");
        assert_eq!(err.kind(), "Invalid");
    }

    #[test]
    fn call_past_deadline_is_rejected() {
        for deadline in ["2026-11-29T10:59:59Z", NOW] {
            let err = CallMeta::validate(CallKind::Hold, req(Some(1), Some(deadline)), t(NOW))
                .expect_err("rejected");
            assert_eq!(err.cause(), Some(RejectCause::DeadlinePassed), "{deadline}");
        }
    }

    #[test]
    fn deadline_is_checked_before_each_request() {
        let meta = CallMeta::validate(
            CallKind::Release,
            req(Some(2), Some("2026-11-29T11:00:10Z")),
            t(NOW),
        )
        .expect("valid");
        assert_eq!(
            meta.time_left(t("2026-11-29T11:00:04Z"))
                .expect("time left"),
            Duration::from_secs(6)
        );
        assert!(meta.check_deadline(t("2026-11-29T11:00:09.999Z")).is_ok());
        for late in ["2026-11-29T11:00:10Z", "2026-11-29T11:05:00Z"] {
            let err = meta.check_deadline(t(late)).expect_err("late");
            assert_eq!(err.cause(), Some(RejectCause::DeadlinePassed), "{late}");
        }
    }

    #[test]
    fn hold_and_release_without_instance_are_invalid() {
        for kind in [CallKind::Hold, CallKind::Release] {
            let err = CallMeta::validate(kind, req(None, Some("2026-11-29T12:00:00Z")), t(NOW))
                .expect_err("invalid");
            assert!(
                matches!(&err, HoldError::Invalid { message } if message.contains("instance")),
                "{kind}: {err:?}"
            );
        }
    }

    #[test]
    fn open_takes_no_instance() {
        let (call, meta) = parse_call(
            CallKind::Open,
            br#"{"instance":0,"deadline":"2026-11-29T12:05:00+01:00"}"#,
            t(NOW),
            by(),
        )
        .expect("valid");
        assert_eq!(call, Call::Open);
        assert_eq!(meta.instance, None);
        assert_eq!(meta.deadline, t("2026-11-29T11:05:00Z"));
    }

    #[test]
    fn malformed_requests_are_invalid() {
        let cases: &[(&[u8], &str)] = &[
            (b"not json", "request body"),
            (
                br#"{"instance":1,"dedline":"2026-11-29T12:00:00Z"}"#,
                "dedline",
            ),
            (
                br#"{"instance":-1,"deadline":"2026-11-29T12:00:00Z"}"#,
                "request body",
            ),
            (br#"{"instance":1,"deadline":"tomorrow"}"#, "RFC 3339"),
            (
                br#"{"instance":1,"deadline":"2026-11-29 12:00"}"#,
                "RFC 3339",
            ),
        ];
        for (body, needle) in cases {
            let err = parse_call(CallKind::Hold, body, t(NOW), by()).expect_err("invalid");
            assert!(
                matches!(&err, HoldError::Invalid { message } if message.contains(needle)),
                "{}: {err:?}",
                String::from_utf8_lossy(body)
            );
        }
        let long = "x".repeat(MAX_REASON_BYTES + 1);
        let body =
            serde_json::json!({"instance":1,"deadline":"2026-11-29T12:00:00Z","reason":long});
        let err = parse_call(CallKind::Hold, body.to_string().as_bytes(), t(NOW), by())
            .expect_err("long");
        assert_eq!(err.kind(), "Invalid");
    }

    #[test]
    fn a_reason_with_a_control_character_is_invalid_naming_the_field_and_where() {
        for (reason, code, at) in [
            ("node \u{1b}[31mlost", "U+001B", 6),
            ("lost\nteam-b   llm   plain   7", "U+000A", 5),
            ("tab\there", "U+0009", 4),
            ("\u{7f}", "U+007F", 1),
            ("c1 \u{9b}2J", "U+009B", 4),
            ("bidi \u{202E}tsol", "U+202E", 6),
            ("isolate \u{2066}x", "U+2066", 9),
        ] {
            let body = serde_json::json!({"instance": 1, "deadline": "2026-11-29T12:00:00Z", "reason": reason});
            let err = parse_call(CallKind::Hold, body.to_string().as_bytes(), t(NOW), by())
                .expect_err("a control character");
            let HoldError::Invalid { message } = &err else {
                panic!("{reason:?}: {err:?}");
            };
            assert!(
                message.contains("reason")
                    && message.contains(code)
                    && message
                        .contains(&format!("reason: character {at} is a control character (")),
                "{reason:?}: {message}"
            );
        }
        // Printable text of any script is a reason.
        for reason in [
            "node lost",
            "nœud perdu — rack 3",
            "ノード喪失",
            "emoji 🔥 ok",
        ] {
            let body = serde_json::json!({"instance": 1, "deadline": "2026-11-29T12:00:00Z", "reason": reason});
            let (call, _) = parse_call(CallKind::Hold, body.to_string().as_bytes(), t(NOW), by())
                .expect("printable");
            assert!(
                matches!(call, Call::Hold { reason: Some(r), .. } if r == reason),
                "{reason}"
            );
        }
        assert_eq!(
            printable("a\u{1b}[2Jb\n\u{202E}"),
            "a\\u{1b}[2Jb\\u{a}\\u{202e}"
        );
        assert!(matches!(
            printable("ノード"),
            std::borrow::Cow::Borrowed("ノード")
        ));
        assert_eq!(first_unprintable("ok"), None);
        assert_eq!(first_unprintable("é\u{0}"), Some((2, '\u{0}')));
    }

    #[test]
    fn hold_call_carries_instance_reason_and_placement_time() {
        let (call, meta) = parse_call(
            CallKind::Hold,
            br#"{"instance":3,"deadline":"2026-11-29T12:00:00Z","reason":"node lost"}"#,
            t(NOW),
            by(),
        )
        .expect("valid");
        assert_eq!(
            call,
            Call::Hold {
                instance: 3,
                reason: Some("node lost".into()),
                placed_at: t(NOW),
                by: by(),
            }
        );
        assert_eq!(call.by(), Some(&by()));
        assert_eq!(
            call.clone().overriding().by().map(|b| b.may_override),
            Some(true)
        );
        assert_eq!(meta.instance, Some(3));
        let (call, _) = parse_call(
            CallKind::Hold,
            br#"{"instance":3,"deadline":"2026-11-29T12:00:00Z","reason":""}"#,
            t(NOW),
            by(),
        )
        .expect("valid");
        assert!(matches!(call, Call::Hold { reason: None, .. }), "{call:?}");
    }

    #[test]
    fn open_targets_the_trainjob_and_holds_target_the_workload_in_kueue_mode() {
        assert_eq!(CallKind::Hold.target(Mode::Kueue), HeldObject::Workload);
        assert_eq!(CallKind::Release.target(Mode::Kueue), HeldObject::Workload);
        assert_eq!(CallKind::Open.target(Mode::Kueue), HeldObject::TrainJob);
        for kind in [CallKind::Hold, CallKind::Release, CallKind::Open] {
            assert_eq!(kind.target(Mode::Plain), HeldObject::TrainJob);
        }
    }

    #[test]
    fn call_bound_is_a_little_longer_than_the_apiserver_timeout() {
        assert_eq!(call_bound(Duration::from_secs(60)), Duration::from_secs(66));
        assert_eq!(call_bound(Duration::from_secs(30)), Duration::from_secs(35));
        assert_eq!(call_bound(Duration::from_secs(0)), Duration::from_secs(5));
        for secs in [1, 10, 34, 60, 120, 3600] {
            let timeout = Duration::from_secs(secs);
            assert!(call_bound(timeout) > timeout);
        }
    }
}
