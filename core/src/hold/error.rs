//! The closed set of errors a hold-family call can end in, and how each is reported.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a call was [`HoldError::Rejected`]: it was well formed, but the state of the world
/// (or the clock) overtook it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum RejectCause {
    /// A newer call has overtaken this one: a newer hold instance is in force, the instance
    /// in force changed between this call's read and its write, or (Release) the instance
    /// named is not the one in force.
    StaleHold,
    /// The call's deadline passed before a request could be sent.
    DeadlinePassed,
    /// Kueue mode: the TrainJob has no Workload to hold.
    NoWorkload,
    /// The TrainJob does not exist (any more).
    NotFound,
    /// A Release, or a Hold of another instance, by a caller who is not the holder of the hold
    /// in force (`holdfast.dev/hold-holder` names another username) and may not override it.
    /// The message names the holder and who may act instead.
    NotHolder,
}

impl RejectCause {
    pub fn as_str(self) -> &'static str {
        match self {
            RejectCause::StaleHold => "StaleHold",
            RejectCause::DeadlinePassed => "DeadlinePassed",
            RejectCause::NoWorkload => "NoWorkload",
            RejectCause::NotFound => "NotFound",
            RejectCause::NotHolder => "NotHolder",
        }
    }
}

impl fmt::Display for RejectCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every hold-family call (Hold, Release, Open) ends in success or in exactly one of these.
///
/// HTTP statuses ([`HoldError::http_status`]) are chosen so that the status alone tells a
/// caller whether to try again, and `Rejected` (final) never shares a status with
/// `Conflict` (transient):
///
/// | error | status | retry? |
/// | --- | --- | --- |
/// | `Invalid` | 400 Bad Request | no: fix the request |
/// | `Rejected` | 409 Conflict | no: the call was overtaken (or its deadline passed); make a new one |
/// | `Unsupported` | 501 Not Implemented | no: the cluster does not allow it (see Preflight) |
/// | `PodsRemain` | 423 Locked | yes, later: the held execution's pods are still there |
/// | `Conflict` | 503 Service Unavailable | yes: eight writes lost to other writers |
/// | `Unknown` | 504 Gateway Timeout | no: a write was sent and its outcome could not be learnt before the deadline; read Status (after the CallBound) |
///
/// `Rejected { cause: NotFound }` (the TrainJob does not exist) answers 404, and
/// `Rejected { cause: NotHolder }` (another identity holds the hold in force) 403.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// The request is malformed: no deadline, no instance where one is needed, bad JSON, or
    /// an object whose holdfast annotations cannot be read.
    #[error("invalid: {message}")]
    Invalid { message: String },
    /// The call was refused; `cause` says why.
    #[error("rejected ({cause}): {message}")]
    Rejected { cause: RejectCause, message: String },
    /// Hold is a probed capability and this cluster does not offer it.
    #[error("unsupported: {reason}")]
    Unsupported { reason: String },
    /// Plain mode: a Release (or an Open) that would start the TrainJob while pods of an
    /// earlier execution remain: nothing was written.
    #[error("pods of the held execution remain; nothing was written")]
    PodsRemain,
    /// Every one of `tries` writes lost a resourceVersion race to another writer.
    #[error("conflict: {tries} writes in a row lost to other writers; nothing was written")]
    Conflict { tries: u32 },
    /// A write was sent, and whether it landed could not be learnt before the deadline (the
    /// answer was lost, and no later read could tell). It may still land within the
    /// CallBound.
    #[error("outcome unknown: {message}")]
    Unknown { message: String },
}

impl HoldError {
    pub fn invalid(message: impl Into<String>) -> Self {
        HoldError::Invalid {
            message: message.into(),
        }
    }

    pub fn stale(message: impl Into<String>) -> Self {
        HoldError::Rejected {
            cause: RejectCause::StaleHold,
            message: message.into(),
        }
    }

    pub fn deadline_passed(message: impl Into<String>) -> Self {
        HoldError::Rejected {
            cause: RejectCause::DeadlinePassed,
            message: message.into(),
        }
    }

    /// A call that ran out of time while it waited for `why` says so, whichever of its steps
    /// met the deadline: the wait's reason leads the message, once (a message already naming
    /// it is kept as it is, so applying this twice changes nothing). Any other answer is kept.
    pub fn while_waiting(self, why: &str) -> Self {
        match self {
            HoldError::Rejected {
                cause: RejectCause::DeadlinePassed,
                message,
            } if !message.contains(why) => HoldError::deadline_passed(format!("{why}; {message}")),
            other => other,
        }
    }

    pub fn no_workload(message: impl Into<String>) -> Self {
        HoldError::Rejected {
            cause: RejectCause::NoWorkload,
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        HoldError::Rejected {
            cause: RejectCause::NotFound,
            message: message.into(),
        }
    }

    pub fn not_holder(message: impl Into<String>) -> Self {
        HoldError::Rejected {
            cause: RejectCause::NotHolder,
            message: message.into(),
        }
    }

    /// Whether this is `Rejected { cause: NotHolder }`: the call would be decided otherwise
    /// if its caller may override.
    pub fn is_not_holder(&self) -> bool {
        self.cause() == Some(RejectCause::NotHolder)
    }

    pub fn unknown(message: impl Into<String>) -> Self {
        HoldError::Unknown {
            message: message.into(),
        }
    }

    pub fn unsupported(reason: impl Into<String>) -> Self {
        HoldError::Unsupported {
            reason: reason.into(),
        }
    }

    /// The `error` field of the API body: the variant's name.
    pub fn kind(&self) -> &'static str {
        self.error_kind().as_str()
    }

    /// The `error` field of the API body.
    pub fn error_kind(&self) -> ErrorKind {
        match self {
            HoldError::Invalid { .. } => ErrorKind::Invalid,
            HoldError::Rejected { .. } => ErrorKind::Rejected,
            HoldError::Unsupported { .. } => ErrorKind::Unsupported,
            HoldError::PodsRemain => ErrorKind::PodsRemain,
            HoldError::Conflict { .. } => ErrorKind::Conflict,
            HoldError::Unknown { .. } => ErrorKind::Unknown,
        }
    }

    /// The rejection's cause, for `Rejected` only.
    pub fn cause(&self) -> Option<RejectCause> {
        match self {
            HoldError::Rejected { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    /// The HTTP status the hold API answers with (see the table on [`HoldError`]).
    pub fn http_status(&self) -> u16 {
        match self {
            HoldError::Invalid { .. } => 400,
            HoldError::Rejected {
                cause: RejectCause::NotFound,
                ..
            } => 404,
            HoldError::Rejected {
                cause: RejectCause::NotHolder,
                ..
            } => 403,
            HoldError::Rejected { .. } => 409,
            HoldError::Unsupported { .. } => 501,
            HoldError::PodsRemain => 423,
            HoldError::Conflict { .. } => 503,
            HoldError::Unknown { .. } => 504,
        }
    }

    /// Whether the same call may succeed if made again later.
    pub fn retryable(&self) -> bool {
        matches!(self, HoldError::PodsRemain | HoldError::Conflict { .. })
    }

    /// A bounded metric label: one of ten fixed strings, never a name or a message.
    pub fn metric_label(&self) -> &'static str {
        match self {
            HoldError::Invalid { .. } => "invalid",
            HoldError::Rejected { cause, .. } => match cause {
                RejectCause::StaleHold => "rejected_stale_hold",
                RejectCause::DeadlinePassed => "rejected_deadline_passed",
                RejectCause::NoWorkload => "rejected_no_workload",
                RejectCause::NotFound => "rejected_not_found",
                RejectCause::NotHolder => "rejected_not_holder",
            },
            HoldError::Unsupported { .. } => "unsupported",
            HoldError::PodsRemain => "pods_remain",
            HoldError::Conflict { .. } => "conflict",
            HoldError::Unknown { .. } => "unknown",
        }
    }

    /// The API body: `{"error":"Rejected","cause":"StaleHold","message":"..."}`.
    pub fn body(&self) -> ErrorBody {
        let message = match self {
            HoldError::Invalid { message }
            | HoldError::Rejected { message, .. }
            | HoldError::Unknown { message } => message.clone(),
            HoldError::Unsupported { reason } => reason.clone(),
            other => other.to_string(),
        };
        ErrorBody {
            error: self.kind().to_owned(),
            cause: self.cause(),
            message,
        }
    }
}

impl Serialize for HoldError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.body().serialize(s)
    }
}

/// The body of a failed hold API call, as sent and as a client parses it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// One of [`ErrorKind`]: a call's `Invalid`, `Rejected`, `Unsupported`, `PodsRemain`,
    /// `Conflict` or `Unknown`, or a refusal's.
    #[schema(value_type = ErrorKind)]
    pub error: String,
    /// Present for `Rejected` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<RejectCause>,
    /// For people; never parse it.
    pub message: String,
}

/// The `error` of a failed call's body. A hold-family call fails with one of the first six
/// (the seed's closed set, [`HoldError`]); the others are refusals before any call is
/// made: `Unauthenticated` (401), `Forbidden` (403), `TooManyRequests` (429) and
/// `Unavailable` (503), the last two with `Retry-After`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
pub enum ErrorKind {
    Invalid,
    Rejected,
    Unsupported,
    PodsRemain,
    Conflict,
    Unknown,
    Unauthenticated,
    Forbidden,
    TooManyRequests,
    Unavailable,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 10] = [
        ErrorKind::Invalid,
        ErrorKind::Rejected,
        ErrorKind::Unsupported,
        ErrorKind::PodsRemain,
        ErrorKind::Conflict,
        ErrorKind::Unknown,
        ErrorKind::Unauthenticated,
        ErrorKind::Forbidden,
        ErrorKind::TooManyRequests,
        ErrorKind::Unavailable,
    ];

    /// The name as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "Invalid",
            ErrorKind::Rejected => "Rejected",
            ErrorKind::Unsupported => "Unsupported",
            ErrorKind::PodsRemain => "PodsRemain",
            ErrorKind::Conflict => "Conflict",
            ErrorKind::Unknown => "Unknown",
            ErrorKind::Unauthenticated => "Unauthenticated",
            ErrorKind::Forbidden => "Forbidden",
            ErrorKind::TooManyRequests => "TooManyRequests",
            ErrorKind::Unavailable => "Unavailable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_that_ran_out_of_time_while_waiting_names_what_it_waited_for() {
        let why = "TrainJob ns/job has no runtime snapshot yet";
        let in_a_read = HoldError::deadline_passed("only 1ms left before the call's deadline")
            .while_waiting(why);
        assert_eq!(in_a_read.cause(), Some(RejectCause::DeadlinePassed));
        assert_eq!(
            in_a_read.body().message,
            format!("{why}; only 1ms left before the call's deadline")
        );
        // Named once, though the wait's own deadline already said it.
        let in_the_wait = HoldError::deadline_passed(format!("{why}; deadline")).while_waiting(why);
        assert_eq!(in_the_wait.body().message, format!("{why}; deadline"));
        // Any other answer is the call's own.
        for other in [
            HoldError::PodsRemain,
            HoldError::stale("older"),
            HoldError::unsupported("no"),
        ] {
            assert_eq!(other.clone().while_waiting(why), other);
        }
    }

    #[test]
    fn error_kinds_are_sent_by_their_names() {
        for kind in ErrorKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).expect("json"),
                serde_json::Value::String(kind.as_str().to_owned())
            );
        }
    }

    fn every_error() -> Vec<HoldError> {
        vec![
            HoldError::invalid("no deadline"),
            HoldError::stale("hold 4 is in force"),
            HoldError::deadline_passed("late"),
            HoldError::no_workload("no Workload"),
            HoldError::unsupported("preflight's hold round trip failed"),
            HoldError::PodsRemain,
            HoldError::Conflict { tries: 8 },
            HoldError::not_found("no TrainJob"),
            HoldError::unknown("the answer was lost"),
            HoldError::not_holder("hold 4 is alice's"),
        ]
    }

    #[test]
    fn errors_serialise_to_the_api_body() {
        let body = serde_json::to_value(HoldError::stale("hold 4 is in force")).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"error":"Rejected","cause":"StaleHold","message":"hold 4 is in force"})
        );
        let body = serde_json::to_value(HoldError::PodsRemain).expect("json");
        assert_eq!(body["error"], "PodsRemain");
        assert!(body.get("cause").is_none());
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("nothing was written"))
        );
        let body = serde_json::to_value(HoldError::unsupported("no RBAC")).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"error":"Unsupported","message":"no RBAC"})
        );
    }

    #[test]
    fn error_body_round_trips_for_clients() {
        for e in every_error() {
            let text = serde_json::to_string(&e).expect("json");
            let back: ErrorBody = serde_json::from_str(&text).expect("parse");
            assert_eq!(back, e.body());
            assert_eq!(back.error, e.kind());
        }
    }

    #[test]
    fn stale_hold_is_classified_as_rejected() {
        let e = HoldError::stale("overtaken");
        assert_eq!(e.kind(), "Rejected");
        assert_eq!(e.cause(), Some(RejectCause::StaleHold));
        assert_eq!(e.http_status(), 409);
        assert!(!e.retryable());
    }

    #[test]
    fn not_holder_is_a_final_rejection_answered_403() {
        let e = HoldError::not_holder("hold 4 is held by dispatch");
        assert_eq!(e.kind(), "Rejected");
        assert_eq!(e.cause(), Some(RejectCause::NotHolder));
        assert!(e.is_not_holder());
        assert!(!HoldError::stale("x").is_not_holder());
        assert_eq!(e.http_status(), 403);
        assert!(!e.retryable());
        assert_eq!(e.metric_label(), "rejected_not_holder");
        assert_eq!(
            serde_json::to_value(&e).expect("json"),
            serde_json::json!({"error": "Rejected", "cause": "NotHolder", "message": "hold 4 is held by dispatch"})
        );
    }

    #[test]
    fn rejected_and_conflict_have_distinct_statuses() {
        let statuses: Vec<u16> = every_error().iter().map(HoldError::http_status).collect();
        assert_eq!(
            statuses,
            vec![400, 409, 409, 409, 501, 423, 503, 404, 504, 403]
        );
        assert!(
            !HoldError::unknown("lost").retryable(),
            "read Status instead"
        );
        assert!(HoldError::Conflict { tries: 8 }.retryable());
        assert!(HoldError::PodsRemain.retryable());
    }

    #[test]
    fn every_error_has_a_bounded_metric_label() {
        let labels: Vec<&str> = every_error().iter().map(HoldError::metric_label).collect();
        let mut unique = labels.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            labels.len(),
            "labels are distinct: {labels:?}"
        );
        for l in labels {
            assert!(
                l.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{l} is a plain label"
            );
        }
    }
}
