//! The hold API's answer bodies as types, so that what is sent and what the OpenAPI document
//! says of it come from one definition.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{Outcome, Status};

/// The `result` of every success body: always `Ok`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum Success {
    #[default]
    Ok,
}

/// A Hold, Release or Open that succeeded: `{"result":"Ok","outcome":"Released","resumed":true}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CallAnswer {
    pub result: Success,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// A Status that succeeded: the [`Status`] with `"result":"Ok"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StatusAnswer {
    pub result: Success,
    #[serde(flatten)]
    pub status: Status,
}

/// The `error` of a failed call's body. A hold-family call fails with one of the first six
/// (the seed's closed set, [`super::HoldError`]); the others are refusals before any call is
/// made: `Unauthenticated` (401), `Forbidden` (403), `TooManyRequests` (429) and
/// `Unavailable` (503), the last two with `Retry-After`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
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
    use serde_json::Value;

    #[test]
    fn error_kinds_are_sent_by_their_names() {
        for kind in ErrorKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).expect("json"),
                Value::String(kind.as_str().to_owned())
            );
        }
    }
}
