//! The answers: kube's `AdmissionResponse`, made from what the policy decided and written the
//! way the apiserver's own encoder writes one.
//!
//! kube's derived serialisation differs from the apiserver's in two places, and the wire
//! format here is the apiserver's (it is also the one holdfast has always sent, byte for
//! byte): `patch` is a base64 string (kube writes the bytes as a list of numbers, which only
//! Go's lenient decoding accepts; kube-rs/kube#1781), and an allowed answer carries no
//! `status` (kube writes an empty one). Members are written in name order.

use base64::Engine as _;
use holdfast_core::policy::request::DecodeError;
use holdfast_core::policy::{Mutation, Verdict};
use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use kube::core::response::{StatusCause, StatusDetails};
use serde_json::{Map, Value};

/// An allowed answer to request `uid`, nothing else said.
pub fn allowed(uid: &str) -> AdmissionResponse {
    // kube makes a response from the request it decoded, or an invalid one; the webhook
    // decodes its requests itself (`decode_review`), so it starts from the latter (whose
    // apiVersion and kind are v1's) and says the rest.
    let mut r = AdmissionResponse::invalid("");
    r.uid = uid.to_owned();
    r.allowed = true;
    r.result = Status::default();
    r
}

/// The answer at `/mutate`: allowed, with the mutation's patch (JSONPatch) and warnings when
/// it has any.
pub fn mutated(uid: &str, m: Mutation) -> AdmissionResponse {
    let mut r = allowed(uid);
    if !m.warnings.is_empty() {
        r.warnings = Some(m.warnings);
    }
    if m.patch.is_empty() {
        return r;
    }
    match r.with_patch(json_patch::Patch(m.patch)) {
        Ok(r) => r,
        Err(e) => refused(
            uid,
            500,
            "InternalError",
            &format!("holdfast could not encode its patch: {e}"),
            None,
        ),
    }
}

/// The answer at `/validate`: allowed, or refused with 403 `Forbidden`, the verdict's message
/// and its field as the cause.
pub fn judged(uid: &str, verdict: &Verdict) -> AdmissionResponse {
    match verdict {
        Verdict::Allow => allowed(uid),
        Verdict::Deny { field, message, .. } => {
            refused(uid, 403, "Forbidden", message, Some(field))
        }
    }
}

/// The answer to a malformed review whose uid could be read: refused with 400 `BadRequest`
/// and the problem. `None` when there is no uid to answer to (the server then answers HTTP
/// 400 with the error's text).
pub fn malformed(err: &DecodeError) -> Option<AdmissionResponse> {
    let uid = err.uid.as_deref()?;
    Some(refused(uid, 400, "BadRequest", &err.to_string(), None))
}

fn refused(
    uid: &str,
    code: u16,
    reason: &str,
    message: &str,
    field: Option<&str>,
) -> AdmissionResponse {
    let mut status = Status::failure(message, reason).with_code(code);
    if let Some(field) = field {
        status = status.with_details(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: vec![StatusCause {
                reason: "FieldValueForbidden".to_owned(),
                message: message.to_owned(),
                field: field.to_owned(),
            }],
            retry_after_seconds: 0,
        });
    }
    let mut r = allowed(uid);
    r.allowed = false;
    r.result = status;
    r
}

/// `r` in its AdmissionReview, as JSON on the wire (see the module's note).
pub fn to_json(r: &AdmissionResponse) -> serde_json::Result<Vec<u8>> {
    let mut response = Map::new();
    response.insert("allowed".to_owned(), Value::Bool(r.allowed));
    if let Some(patch) = &r.patch {
        response.insert(
            "patch".to_owned(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(patch)),
        );
        // The only patch type there is (`with_patch` sets it, privately).
        response.insert("patchType".to_owned(), Value::from("JSONPatch"));
    }
    if !r.allowed {
        response.insert("status".to_owned(), serde_json::to_value(&r.result)?);
    }
    response.insert("uid".to_owned(), Value::String(r.uid.clone()));
    if let Some(warnings) = &r.warnings {
        response.insert("warnings".to_owned(), serde_json::to_value(warnings)?);
    }
    let mut review = Map::new();
    review.insert(
        "apiVersion".to_owned(),
        Value::String(r.types.api_version.clone()),
    );
    review.insert("kind".to_owned(), Value::String(r.types.kind.clone()));
    review.insert("response".to_owned(), Value::Object(response));
    serde_json::to_vec(&review)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use holdfast_core::policy::Rule;
    use holdfast_core::policy::request::decode_review;
    use json_patch::{AddOperation, PatchOperation};
    use jsonptr::PointerBuf;
    use serde_json::json;

    fn wire(r: &AdmissionResponse) -> String {
        String::from_utf8(to_json(r).unwrap()).unwrap()
    }

    /// The answers byte for byte as holdfast wrote them before kube's types.
    #[test]
    fn answers_are_written_as_before() {
        assert_eq!(
            wire(&judged("u1", &Verdict::Allow)),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true,"uid":"u1"}}"#
        );
        assert_eq!(
            wire(&mutated("u1", Mutation::default())),
            wire(&judged("u1", &Verdict::Allow))
        );
        let m = Mutation {
            patch: vec![PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["spec", "suspend"]),
                value: json!(true),
            })],
            gate_closed: true,
            warnings: vec!["w1".into(), "w2".into()],
            ..Mutation::default()
        };
        assert_eq!(
            wire(&mutated("u2", m)),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true,"patch":"W3sib3AiOiJhZGQiLCJwYXRoIjoiL3NwZWMvc3VzcGVuZCIsInZhbHVlIjp0cnVlfV0=","patchType":"JSONPatch","uid":"u2","warnings":["w1","w2"]}}"#
        );
        let deny = Verdict::Deny {
            rule: Rule::KueueSuspend,
            field: "spec.suspend".into(),
            message: "no \"x\"".into(),
        };
        assert_eq!(
            wire(&judged("u3", &deny)),
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":false,"status":{"code":403,"details":{"causes":[{"field":"spec.suspend","message":"no \"x\"","reason":"FieldValueForbidden"}]},"message":"no \"x\"","reason":"Forbidden","status":"Failure"},"uid":"u3"}}"#
        );
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": 1},
        });
        let err = decode_review(&serde_json::to_vec(&body).unwrap()).unwrap_err();
        assert_eq!(
            wire(&malformed(&err).unwrap()),
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{{"allowed":false,"status":{{"code":400,"message":{},"reason":"BadRequest","status":"Failure"}},"uid":"705ab4f5-6393-11e8-b7cc-42010a800002"}}}}"#,
                json!(err.to_string())
            )
        );
        assert!(malformed(&decode_review(b"nope").unwrap_err()).is_none());
    }

    #[test]
    fn a_mutation_with_warnings_but_no_patch_says_them() {
        let m = Mutation {
            warnings: vec!["w".into()],
            ..Mutation::default()
        };
        let v: Value = serde_json::from_slice(&to_json(&mutated("u", m)).unwrap()).unwrap();
        assert_eq!(
            v["response"],
            json!({"allowed": true, "uid": "u", "warnings": ["w"]})
        );
    }

    /// What kube reads back is the answer given: the wire format is kube's type's, only the
    /// patch's encoding differs.
    #[test]
    fn kube_reads_the_answer_back() {
        let deny = Verdict::Deny {
            rule: Rule::StartGateLabel,
            field: "metadata.labels".into(),
            message: "m".into(),
        };
        let r = judged("u", &deny);
        let mut v: Value = serde_json::from_slice(&to_json(&r).unwrap()).unwrap();
        let back: AdmissionResponse = serde_json::from_value(v["response"].take()).unwrap();
        assert_eq!(back.uid, "u");
        assert!(!back.allowed);
        assert_eq!(back.result, r.result);
    }
}
