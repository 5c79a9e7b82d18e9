//! The hold API's answer bodies as types, so that what is sent and what the OpenAPI document
//! says of it come from one definition.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use serde_json::Value;

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

impl Outcome {
    /// The success body: `{"result":"Ok","outcome":"Released","resumed":true}`
    /// ([`CallAnswer`]).
    pub fn body(&self) -> Value {
        serde_json::to_value(CallAnswer {
            result: Success::Ok,
            outcome: *self,
        })
        .unwrap_or(Value::Null)
    }
}

impl Status {
    /// The success body: this status with `"result":"Ok"` ([`StatusAnswer`]).
    pub fn body(&self) -> Value {
        serde_json::to_value(StatusAnswer {
            result: Success::Ok,
            status: self.clone(),
        })
        .unwrap_or(Value::Null)
    }
}
