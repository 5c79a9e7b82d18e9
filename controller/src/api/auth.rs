//! Who is calling, and may they: TokenReview for the bearer token, SubjectAccessReview on
//! `holdfast.dev` `trainjobs/<call>` for the call.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewSpec},
    authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
};
use kube::api::{Api, PostParams};

/// The API group callers are authorised on.
pub const GROUP: &str = "holdfast.dev";
/// The resource callers are authorised on; the call is its subresource.
pub const RESOURCE: &str = "trainjobs";
/// How long a TokenReview or SubjectAccessReview may take.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// An authenticated caller, as TokenReview names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a call needs to be allowed: `verb` on `holdfast.dev` `trainjobs/<subresource>`, in
/// `namespace` for `name` when the call names one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub verb: &'static str,
    pub subresource: &'static str,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// Why a caller was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// 401: no bearer token, or one the apiserver does not accept.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: authenticated, but not allowed this call.
    #[error("{0}")]
    Forbidden(String),
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Unauthenticated(_) => 401,
            Refusal::Forbidden(_) => 403,
        }
    }

    /// The `error` field of the refusal's body.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Unauthenticated(_) => "Unauthenticated",
            Refusal::Forbidden(_) => "Forbidden",
        }
    }

    /// The bounded metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Refusal::Unauthenticated(_) => "unauthenticated",
            Refusal::Forbidden(_) => "forbidden",
        }
    }
}

/// The bearer token of an `Authorization` header value.
pub fn bearer_token(header: Option<&str>) -> Result<&str, Refusal> {
    let value = header.ok_or_else(|| {
        Refusal::Unauthenticated("no Authorization header: send a Kubernetes bearer token".into())
    })?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| Refusal::Unauthenticated("the Authorization header is not Bearer".into()))?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(Refusal::Unauthenticated(
            "the Authorization header is not Bearer".into(),
        ));
    }
    Ok(token)
}

/// Authenticates and authorises callers through the apiserver.
#[derive(Clone)]
pub struct KubeAuth {
    client: kube::Client,
}

impl KubeAuth {
    pub fn new(client: kube::Client) -> Self {
        KubeAuth { client }
    }

    /// Who holds `token`: a TokenReview.
    pub async fn authenticate(&self, token: &str) -> Result<Caller, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer =
            tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
                .await
                .map_err(|_| {
                    Refusal::Unauthenticated("the token could not be verified in time".into())
                })?
                .map_err(|e| {
                    Refusal::Unauthenticated(format!("the token could not be verified: {e}"))
                })?;
        let status = answer.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(Refusal::Unauthenticated(format!(
                "the token was not accepted{}",
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )));
        }
        let user = status.user.unwrap_or_default();
        let username = user
            .username
            .filter(|u| !u.is_empty())
            .ok_or_else(|| Refusal::Unauthenticated("the token names no user".into()))?;
        Ok(Caller {
            username,
            uid: user.uid,
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        })
    }

    /// Whether `caller` may make the call: a SubjectAccessReview.
    pub async fn authorize(&self, caller: &Caller, access: &Access) -> Result<(), Refusal> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.username.clone()),
                uid: caller.uid.clone(),
                groups: Some(caller.groups.clone()),
                extra: Some(caller.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(GROUP.to_owned()),
                    resource: Some(RESOURCE.to_owned()),
                    subresource: Some(access.subresource.to_owned()),
                    verb: Some(access.verb.to_owned()),
                    namespace: access.namespace.clone(),
                    name: access.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let what = describe(access);
        let answer =
            tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
                .await
                .map_err(|_| {
                    Refusal::Forbidden(format!(
                        "could not check whether {} may {what} in time",
                        caller.username
                    ))
                })?
                .map_err(|e| {
                    Refusal::Forbidden(format!(
                        "could not check whether {} may {what}: {e}",
                        caller.username
                    ))
                })?;
        let status = answer.status.unwrap_or_default();
        if status.allowed && status.denied != Some(true) {
            Ok(())
        } else {
            Err(Refusal::Forbidden(format!(
                "{} may not {what}{}",
                caller.username,
                status
                    .reason
                    .filter(|r| !r.is_empty())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            )))
        }
    }
}

/// `create holdfast.dev trainjobs/hold in team-a/mnist`.
fn describe(access: &Access) -> String {
    let mut s = format!("{} {GROUP} {RESOURCE}/{}", access.verb, access.subresource);
    match (&access.namespace, &access.name) {
        (Some(ns), Some(name)) => s.push_str(&format!(" of {ns}/{name}")),
        (Some(ns), None) => s.push_str(&format!(" in {ns}")),
        _ => {}
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_authenticates() {
        assert_eq!(bearer_token(Some("Bearer abc")).ok(), Some("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")).ok(), Some("abc"));
        for bad in [
            None,
            Some(""),
            Some("Basic abc"),
            Some("Bearer "),
            Some("abc"),
        ] {
            let err = bearer_token(bad).expect_err("refused");
            assert_eq!(err.status(), 401, "{bad:?}");
        }
    }

    #[test]
    fn refusals_name_the_access_needed() {
        let access = Access {
            verb: "create",
            subresource: "hold",
            namespace: Some("team-a".into()),
            name: Some("mnist".into()),
        };
        assert_eq!(
            describe(&access),
            "create holdfast.dev trainjobs/hold of team-a/mnist"
        );
        assert_eq!(Refusal::Forbidden("x".into()).kind(), "Forbidden");
        assert_eq!(Refusal::Forbidden("x".into()).metric_label(), "forbidden");
    }
}
