//! AdmissionReview v1 requests on the wire: [`decode_review`] turns the request body into an
//! [`AdmissionInput`], with a clear error for anything malformed, reading only what the policy
//! reads. It is pure and fuzzed (`policy_fuzz`). The answer is the webhook server's: it
//! builds kube's `AdmissionResponse` from the [`Verdict`](super::Verdict) or
//! [`Mutation`](super::Mutation) the policy decided.

use super::{AdmissionInput, Operation, Resource, UserInfo};
use serde_json::{Map, Value};

mod pruned;
mod wire;

pub use pruned::prune_object;
pub use wire::{API_VERSION, KIND};

/// Longest excerpt of a bad value quoted in an error.
const QUOTE_MAX: usize = 64;

/// A request body that is not a usable AdmissionReview v1.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed AdmissionReview: {problem}")]
pub struct DecodeError {
    /// `request.uid`, when it could be read: the answer can then name the request (an
    /// AdmissionReview refusing it, status 400); without it only an HTTP 400 is possible.
    pub uid: Option<String>,
    pub problem: Problem,
}

/// What is wrong with a request body.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("the body is not JSON: {0}")]
    NotJson(String),
    #[error("the body is {0}, not a JSON object")]
    NotAnObject(&'static str),
    #[error("apiVersion is {0}, expected \"admission.k8s.io/v1\"")]
    WrongApiVersion(String),
    #[error("kind is {0}, expected \"AdmissionReview\"")]
    WrongKind(String),
    #[error("request is missing")]
    MissingRequest,
    #[error("request.uid is missing or empty")]
    MissingUid,
    #[error("request.operation is {0}, expected CREATE, UPDATE, DELETE or CONNECT")]
    BadOperation(String),
    #[error("{field} {reason}")]
    BadField { field: &'static str, reason: String },
}

/// A value as quoted in an error: JSON, cut short.
fn quote(v: Option<&Value>) -> String {
    match v {
        None => "missing".to_owned(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > QUOTE_MAX {
                let cut: String = s.chars().take(QUOTE_MAX).collect();
                format!("{cut}…")
            } else {
                s
            }
        }
    }
}

fn bad(field: &'static str, reason: impl Into<String>) -> Problem {
    Problem::BadField {
        field,
        reason: reason.into(),
    }
}

/// An optional string member; `null` is absent.
fn opt_str<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<Option<&'a str>, Problem> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(bad(
            field,
            format!("is {}, expected a string", super::object::type_name(other)),
        )),
    }
}

fn opt_object<'a>(
    m: &'a Map<String, Value>,
    key: &str,
    field: &'static str,
) -> Result<Option<&'a Map<String, Value>>, Problem> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(other) => Err(bad(
            field,
            format!("is {}, expected an object", super::object::type_name(other)),
        )),
    }
}

/// Parses an AdmissionReview v1 request body into its `request.uid` and the policy's input.
///
/// Required: `apiVersion: admission.k8s.io/v1`, `kind: AdmissionReview`, `request` with a
/// non-empty `uid`, `resource.resource`, `operation` and `userInfo`. Optional: `kind` (not
/// used: the policy goes by resource), `resource.group` (core = ""), `subResource` ("" = none),
/// `name` (empty on `generateName`), `namespace`, `userInfo.username`/`groups`, `object`,
/// `oldObject` (`null` = absent; any JSON, judged by the policy), `dryRun`.
///
/// Of `object` and `oldObject` only the members the policy reads are kept ([`prune_object`]:
/// the field list the rules read through, `policy::object::FIELDS`); the rest of the body is
/// checked as JSON (and UTF-8) and dropped unread, which is most of what an admission would
/// otherwise cost.
pub fn decode_review(bytes: &[u8]) -> Result<(String, AdmissionInput), DecodeError> {
    let no_uid = |problem| DecodeError { uid: None, problem };
    let text = std::str::from_utf8(bytes).map_err(|e| no_uid(Problem::NotJson(e.to_string())))?;
    if let Some(decoded) = wire::decode(text) {
        return Ok(decoded);
    }
    decode_generally(text)
}

/// `decode_review` for any body: reads it into (pruned) JSON values and says what is wrong.
fn decode_generally(text: &str) -> Result<(String, AdmissionInput), DecodeError> {
    let no_uid = |problem| DecodeError { uid: None, problem };
    let review =
        pruned::parse(text, pruned::REVIEW).map_err(|e| no_uid(Problem::NotJson(e.to_string())))?;
    let Value::Object(mut review) = review else {
        return Err(no_uid(Problem::NotAnObject(super::object::type_name(
            &review,
        ))));
    };
    let api_version = review.get("apiVersion");
    if api_version.and_then(Value::as_str) != Some(API_VERSION) {
        return Err(no_uid(Problem::WrongApiVersion(quote(api_version))));
    }
    let kind = review.get("kind");
    if kind.and_then(Value::as_str) != Some(KIND) {
        return Err(no_uid(Problem::WrongKind(quote(kind))));
    }
    let mut request = match review.remove("request") {
        None | Some(Value::Null) => return Err(no_uid(Problem::MissingRequest)),
        Some(Value::Object(request)) => request,
        Some(other) => {
            return Err(no_uid(bad(
                "request",
                format!(
                    "is {}, expected an object",
                    super::object::type_name(&other)
                ),
            )));
        }
    };
    let uid = match request.get("uid") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return Err(no_uid(Problem::MissingUid)),
    };
    match decode_request(&mut request) {
        Ok(input) => Ok((uid, input)),
        Err(problem) => Err(DecodeError {
            uid: Some(uid),
            problem,
        }),
    }
}

fn decode_request(request: &mut Map<String, Value>) -> Result<AdmissionInput, Problem> {
    opt_object(request, "kind", "request.kind")?;
    let resource = opt_object(request, "resource", "request.resource")?
        .ok_or_else(|| bad("request.resource", "is missing"))?;
    let group = opt_str(resource, "group", "request.resource.group")?.unwrap_or("");
    let plural = opt_str(resource, "resource", "request.resource.resource")?
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("request.resource.resource", "is missing or empty"))?;
    let subresource = opt_str(request, "subResource", "request.subResource")?
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let name = opt_str(request, "name", "request.name")?
        .unwrap_or("")
        .to_owned();
    let namespace = opt_str(request, "namespace", "request.namespace")?
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let op = request.get("operation");
    let operation = op
        .and_then(Value::as_str)
        .and_then(Operation::from_admission)
        .ok_or_else(|| Problem::BadOperation(quote(op)))?;
    let user_info = opt_object(request, "userInfo", "request.userInfo")?
        .ok_or_else(|| bad("request.userInfo", "is missing"))?;
    let username = opt_str(user_info, "username", "request.userInfo.username")?
        .unwrap_or("")
        .to_owned();
    let groups = match user_info.get("groups") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|g| g.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("request.userInfo.groups", "holds a non-string"))?,
        Some(other) => {
            return Err(bad(
                "request.userInfo.groups",
                format!("is {}, expected a list", super::object::type_name(other)),
            ));
        }
    };
    let dry_run = match request.get("dryRun") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(bad(
                "request.dryRun",
                format!("is {}, expected a boolean", super::object::type_name(other)),
            ));
        }
    };
    let resource = Resource::from_group_resource(group, plural);
    let mut side = |key: &str| request.remove(key).filter(|v| !v.is_null());
    Ok(AdmissionInput {
        operation,
        resource,
        subresource,
        name,
        namespace,
        user: UserInfo { username, groups },
        object: side("object"),
        old_object: side("oldObject"),
        dry_run,
    })
}

#[cfg(test)]
mod tests;
