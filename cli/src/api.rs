//! The hold API's client.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::args::{Command, Target};

/// A request to the hold API.
#[derive(Debug, PartialEq)]
pub struct ApiRequest {
    pub post: bool,
    pub path: String,
    pub body: Option<Value>,
}

fn call_path(t: &Target, call: &str) -> String {
    format!("/v1/namespaces/{}/trainjobs/{}/{call}", t.namespace, t.name)
}

/// `within` from now, in UTC with milliseconds (`2026-11-29T12:00:00.000Z`); the last
/// representable instant if that is beyond it.
fn deadline(within: Duration) -> String {
    let at = Timestamp::now()
        .saturating_add(within)
        .unwrap_or(Timestamp::MAX);
    holdfast_core::rfc3339::millis(at)
}

impl ApiRequest {
    /// The Status call on `target`.
    pub fn status(target: &Target) -> ApiRequest {
        ApiRequest {
            post: false,
            path: call_path(target, "status"),
            body: None,
        }
    }

    /// The request a command makes, a call's deadline counted from now (so each try of a
    /// retried call has its own); `None` for `status` without a TrainJob (a listing read from
    /// the cluster, not the hold API), `check` and `completion`. `namespace` is --namespace
    /// (`drift`'s scope).
    pub fn of(command: &Command, namespace: Option<&str>) -> Option<ApiRequest> {
        Some(match command {
            Command::Hold {
                target,
                instance,
                reason,
                deadline_in,
                ..
            } => {
                let mut body = json!({"instance": instance, "deadline": deadline(*deadline_in)});
                if let Some(r) = reason {
                    body["reason"] = json!(r);
                }
                ApiRequest {
                    post: true,
                    path: call_path(target, "hold"),
                    body: Some(body),
                }
            }
            Command::Release {
                target,
                instance,
                deadline_in,
                ..
            } => ApiRequest {
                post: true,
                path: call_path(target, "release"),
                body: Some(json!({"instance": instance, "deadline": deadline(*deadline_in)})),
            },
            Command::Open {
                target,
                deadline_in,
            } => ApiRequest {
                post: true,
                path: call_path(target, "open"),
                body: Some(json!({"deadline": deadline(*deadline_in)})),
            },
            Command::Status {
                target: Some(target),
                ..
            } => ApiRequest::status(target),
            Command::Status { target: None, .. }
            | Command::Check { .. }
            | Command::Completion { .. } => {
                return None;
            }
            Command::Drift => ApiRequest {
                post: false,
                path: match namespace {
                    Some(ns) => format!("/v1/drift?namespace={ns}"),
                    None => "/v1/drift".to_owned(),
                },
                body: None,
            },
            Command::Fence { node } => ApiRequest {
                post: true,
                path: format!("/v1/nodes/{node}/fence"),
                body: Some(json!({})),
            },
            Command::Preflight { target } => ApiRequest {
                post: false,
                path: match target {
                    Some(t) => format!("/v1/preflight?namespace={}&name={}", t.namespace, t.name),
                    None => "/v1/preflight".to_owned(),
                },
                body: None,
            },
        })
    }

    /// Sends it; the answer's status and JSON body.
    pub async fn send(
        &self,
        http: &reqwest::Client,
        server: &str,
        token: &str,
    ) -> anyhow::Result<(u16, Value)> {
        let url = format!("{}{}", server.trim_end_matches('/'), self.path);
        let req = if self.post {
            http.post(&url)
                .json(self.body.as_ref().unwrap_or(&Value::Null))
        } else {
            http.get(&url)
        };
        let resp = req.bearer_auth(token).send().await?;
        let status = resp.status().as_u16();
        let text = resp.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            namespace: "team-a".into(),
            name: "mnist".into(),
        }
    }

    #[test]
    fn commands_become_api_requests() {
        let req = ApiRequest::of(
            &Command::Hold {
                target: target(),
                instance: 3,
                reason: Some("node lost".into()),
                deadline_in: Duration::from_secs(30),
                wait_stopped: None,
            },
            None,
        )
        .expect("a call");
        assert!(req.post);
        assert_eq!(req.path, "/v1/namespaces/team-a/trainjobs/mnist/hold");
        let body = req.body.expect("body");
        assert_eq!(body["instance"], 3);
        assert_eq!(body["reason"], "node lost");
        let written = body["deadline"].as_str().expect("deadline");
        assert_eq!(written.len(), "2026-11-29T12:00:00.000Z".len(), "{written}");
        assert!(written.ends_with('Z'), "{written}");
        let deadline: Timestamp = written.parse().expect("RFC 3339");
        let left = deadline.duration_since(Timestamp::now());
        assert!(
            left > jiff::SignedDuration::from_secs(25)
                && left <= jiff::SignedDuration::from_secs(30)
        );

        let req = ApiRequest::of(
            &Command::Open {
                target: target(),
                deadline_in: Duration::from_secs(5),
            },
            None,
        )
        .expect("a call");
        assert!(req.body.expect("body").get("instance").is_none());
        let req = ApiRequest::of(
            &Command::Preflight {
                target: Some(target()),
            },
            None,
        )
        .expect("a call");
        assert_eq!(req.path, "/v1/preflight?namespace=team-a&name=mnist");
        assert!(!req.post);
        assert!(
            ApiRequest::of(
                &Command::Status {
                    target: None,
                    all_namespaces: true,
                },
                None
            )
            .is_none()
        );
    }
}
