//! Why an admission request got no AdmissionReview answer, and the HTTP answer it gets instead.
//!
//! Every error is answered with a `v1 Status` JSON body, which the apiserver's client decodes
//! into the message it reports ("failed calling webhook ...: <message>"), so whoever reads the
//! refused write's error sees why. The apiserver then applies the webhook's failurePolicy;
//! only a `503` with `Retry-After` (a shed admission) is first retried, while the webhook's
//! `timeoutSeconds` lasts.

use axum::response::{IntoResponse, Response};
use holdfast_core::policy::request::DecodeError;
use http::{HeaderValue, StatusCode, header};
use serde_json::json;
use std::time::Duration;

/// A request the webhook could not answer with an AdmissionReview.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("the request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("content type {0:?} is not application/json; an AdmissionReview is JSON")]
    UnsupportedMediaType(String),
    #[error("reading the request body failed: {0}")]
    Body(String),
    /// The body did not arrive in time: a client trickling it (the apiserver sends a review
    /// in one go). The connection is closed after this answer.
    #[error("the request body did not arrive within {0:?}")]
    BodyTimeout(Duration),
    /// A body that is not an AdmissionReview and names no `request.uid` to answer to.
    #[error(transparent)]
    Malformed(DecodeError),
    #[error("the admission took longer than {0:?}")]
    Timeout(Duration),
    #[error(
        "holdfast-webhook is answering {limit} admissions already; this one is shed (retry later)"
    )]
    Overloaded { limit: usize },
    #[error("no such endpoint: the admission endpoints are POST /mutate and POST /validate")]
    NotFound,
    #[error("method {0} is not allowed: the admission endpoints take POST")]
    MethodNotAllowed(String),
    #[error("encoding the answer failed: {0}")]
    Encode(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl WebhookError {
    /// A bounded label for metrics (never an object name or a message).
    pub fn metric_label(&self) -> &'static str {
        match self {
            WebhookError::BodyTooLarge { .. } => "body_too_large",
            WebhookError::UnsupportedMediaType(_) => "unsupported_media_type",
            WebhookError::Body(_) => "body",
            WebhookError::BodyTimeout(_) => "body_timeout",
            WebhookError::Malformed(_) => "malformed",
            WebhookError::Timeout(_) => "timeout",
            WebhookError::Overloaded { .. } => "overloaded",
            WebhookError::NotFound => "not_found",
            WebhookError::MethodNotAllowed(_) => "method_not_allowed",
            WebhookError::Encode(_) => "encode",
            WebhookError::Internal(_) => "internal",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            WebhookError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            WebhookError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            WebhookError::Body(_) | WebhookError::Malformed(_) => StatusCode::BAD_REQUEST,
            WebhookError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            WebhookError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            WebhookError::Overloaded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            WebhookError::NotFound => StatusCode::NOT_FOUND,
            WebhookError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            WebhookError::Encode(_) | WebhookError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// The `reason` of the Status body, in Kubernetes' words.
    fn reason(&self) -> &'static str {
        match self {
            WebhookError::BodyTooLarge { .. } => "RequestEntityTooLarge",
            WebhookError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            WebhookError::Body(_) | WebhookError::Malformed(_) => "BadRequest",
            WebhookError::Timeout(_) | WebhookError::BodyTimeout(_) => "Timeout",
            WebhookError::Overloaded { .. } => "ServiceUnavailable",
            WebhookError::NotFound => "NotFound",
            WebhookError::MethodNotAllowed(_) => "MethodNotAllowed",
            WebhookError::Encode(_) | WebhookError::Internal(_) => "InternalError",
        }
    }
}

impl IntoResponse for WebhookError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = json!({
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": status.as_u16(),
            "reason": self.reason(),
            "message": format!("holdfast-webhook: {self}"),
        });
        let mut response = (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body.to_string(),
        )
            .into_response();
        if matches!(self, WebhookError::Overloaded { .. }) {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_a_distinct_bounded_label() {
        let all = [
            WebhookError::BodyTooLarge { limit: 1 },
            WebhookError::UnsupportedMediaType("text/plain".into()),
            WebhookError::Body("x".into()),
            WebhookError::Malformed(DecodeError {
                uid: None,
                problem: holdfast_core::policy::request::Problem::MissingRequest,
            }),
            WebhookError::Timeout(Duration::from_secs(1)),
            WebhookError::Overloaded { limit: 1 },
            WebhookError::NotFound,
            WebhookError::MethodNotAllowed("GET".into()),
            WebhookError::Encode("x".into()),
            WebhookError::BodyTimeout(Duration::from_secs(2)),
            WebhookError::Internal("x".into()),
        ];
        let labels: std::collections::BTreeSet<_> = all.iter().map(|e| e.metric_label()).collect();
        assert_eq!(labels.len(), all.len());
        for e in &all {
            let l = e.metric_label();
            assert!(l.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{l}");
            assert!(e.status().is_client_error() || e.status().is_server_error());
        }
    }
}
