//! Who is calling, and may they: TokenReview for the bearer token, SubjectAccessReview on
//! `holdfast.dev` `trainjobs/<call>` for the call. Both answers are remembered briefly
//! ([`super::review_cache`]); a review that could not be made is never remembered.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::limits::{Budget, Shed};
use super::review_cache::{ACCEPTED_TTL, CAPACITY, REFUSED_TTL, TtlCache, token_key};
use std::net::IpAddr;

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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a call needs to be allowed: `verb` on `holdfast.dev` `trainjobs/<subresource>`, in
/// `namespace` for `name` when the call names one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    pub verb: &'static str,
    /// `trainjobs` for the calls on a TrainJob ([`RESOURCE`]); `nodes` for a fence.
    pub resource: &'static str,
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
    /// 400: the call names a namespace or TrainJob no object can have; refused before any
    /// review, so nothing of it is remembered.
    #[error("{0}")]
    Invalid(String),
    /// 503 or 429 with `Retry-After`: a bound of [`super::limits`] was reached.
    #[error("{}", shed_message(*.0))]
    Shed(Shed),
}

/// What a shed caller is told.
fn shed_message(why: Shed) -> String {
    match why {
        Shed::ReviewsInFlight => {
            "the hold API has as many token and access reviews in flight as it allows; retry after the Retry-After seconds".into()
        }
        Shed::FailedAuthentications { .. } => {
            "too many tokens from this address were refused lately; retry after the Retry-After seconds with a valid token".into()
        }
        Shed::RequestsPerUser => {
            "this user has as many hold API requests in flight as it may; retry after the Retry-After seconds".into()
        }
        Shed::ConnectionsPerUser => {
            "this user has as many connections to the hold API as it may; reuse one, or retry after the Retry-After seconds".into()
        }
    }
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Unauthenticated(_) => 401,
            Refusal::Forbidden(_) => 403,
            Refusal::Invalid(_) => 400,
            Refusal::Shed(Shed::ReviewsInFlight) => 503,
            Refusal::Shed(_) => 429,
        }
    }

    /// The `error` field of the refusal's body.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::Unauthenticated(_) => "Unauthenticated",
            Refusal::Forbidden(_) => "Forbidden",
            Refusal::Invalid(_) => "Invalid",
            Refusal::Shed(Shed::ReviewsInFlight) => "Unavailable",
            Refusal::Shed(_) => "TooManyRequests",
        }
    }

    /// The bounded metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Refusal::Unauthenticated(_) => "unauthenticated",
            Refusal::Forbidden(_) => "forbidden",
            Refusal::Invalid(_) => "invalid",
            Refusal::Shed(_) => "shed",
        }
    }

    /// `Retry-After` seconds, for a shed request.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Refusal::Shed(why) => Some(why.retry_after_secs()),
            _ => None,
        }
    }
}

/// Whether `s` is a DNS-1123 label (a namespace's name): at most 63 lowercase letters, digits
/// and `-`, starting and ending with a letter or digit.
fn dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// Whether `s` is a DNS-1123 subdomain (a TrainJob's name): at most 253 characters, labels
/// joined by `.`.
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

/// Refuses a call whose namespace or name no object can have, before any review: the
/// remembered answers are keyed by them, so an unchecked name would let a caller fill the
/// memory with megabytes of path.
pub fn check_names(access: &Access) -> Result<(), Refusal> {
    if let Some(ns) = &access.namespace
        && !dns_label(ns)
    {
        return Err(Refusal::Invalid(format!(
            "namespace {:?} is not a DNS-1123 label (at most 63 lowercase letters, digits and '-')",
            truncated(ns)
        )));
    }
    if let Some(name) = &access.name
        && !dns_subdomain(name)
    {
        return Err(Refusal::Invalid(format!(
            "TrainJob name {:?} is not a DNS-1123 subdomain (at most 253 lowercase letters, digits, '-' and '.')",
            truncated(name)
        )));
    }
    Ok(())
}

/// At most 80 characters of `s`, for a message.
fn truncated(s: &str) -> String {
    s.chars().take(80).collect()
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

/// A remembered answer: the caller (or `()`), or the refusal's message.
type Answer<T> = Result<T, String>;

/// Remembered answers, shared by every clone of [`KubeAuth`].
type Memory<K, T> = Arc<Mutex<TtlCache<K, Answer<T>>>>;

/// Authenticates and authorises callers through the apiserver.
#[derive(Clone)]
pub struct KubeAuth {
    client: kube::Client,
    tokens: Memory<[u8; 32], Caller>,
    grants: Memory<(Caller, Access), ()>,
    /// The TokenReview's `spec.audiences`; empty: the apiserver's own.
    audiences: Vec<String>,
    budget: Budget,
}

/// Reads `cache`, recovering it if a panicking holder poisoned it.
fn remembered<K: std::hash::Hash + Eq + Clone, V: Clone>(
    cache: &Mutex<TtlCache<K, V>>,
    key: &K,
) -> Option<V> {
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(key, Instant::now())
}

/// Keeps the apiserver's answer `value` for `key`.
fn remember<K: std::hash::Hash + Eq + Clone, T: Clone>(
    cache: &Mutex<TtlCache<K, Answer<T>>>,
    key: K,
    value: Answer<T>,
) {
    let ttl = if value.is_ok() {
        ACCEPTED_TTL
    } else {
        REFUSED_TTL
    };
    cache
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key, value, ttl, Instant::now());
}

impl KubeAuth {
    pub fn new(client: kube::Client) -> Self {
        KubeAuth {
            client,
            tokens: Arc::new(Mutex::new(TtlCache::new(CAPACITY))),
            grants: Arc::new(Mutex::new(TtlCache::new(CAPACITY))),
            audiences: Vec::new(),
            budget: Budget::default(),
        }
    }

    /// Tokens must be meant for one of `audiences` (TokenReview `spec.audiences`); empty:
    /// for the apiserver itself.
    pub fn with_audiences(mut self, audiences: Vec<String>) -> Self {
        self.audiences = audiences;
        self
    }

    /// The bounds on reviews and callers ([`super::limits`]).
    pub fn with_budget(mut self, budget: Budget) -> Self {
        self.budget = budget;
        self
    }

    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    /// Who holds `token`: a TokenReview, or its answer of the last few seconds.
    pub async fn authenticate(&self, token: &str) -> Result<Caller, Refusal> {
        self.authenticate_from(token, None).await
    }

    /// [`authenticate`](Self::authenticate) for a request from `source`: a review takes a
    /// permit, and one of the source's failed authentications (given back if the token is
    /// accepted); without either, the request is shed unreviewed.
    pub async fn authenticate_from(
        &self,
        token: &str,
        source: Option<IpAddr>,
    ) -> Result<Caller, Refusal> {
        let key = token_key(token);
        if let Some(answer) = remembered(&self.tokens, &key) {
            return answer.map_err(Refusal::Unauthenticated);
        }
        let suspect = source.is_some_and(|s| self.budget.is_suspect(s));
        if let Some(source) = source {
            self.budget.take_failure(source).map_err(Refusal::Shed)?;
        }
        let reviewed = async {
            let _permit = self
                .budget
                .review_permit(suspect)
                .await
                .map_err(Refusal::Shed)?;
            self.review_token(token).await
        }
        .await;
        if let Some(source) = source
            && !matches!(reviewed, Ok(Err(_)))
        {
            self.budget.give_back_failure(source);
        }
        let answer = reviewed?;
        remember(&self.tokens, key, answer.clone());
        answer.map_err(Refusal::Unauthenticated)
    }

    /// Whether `caller` may make the call: a SubjectAccessReview, or its answer of the last
    /// few seconds. A call naming a TrainJob is first checked namespace-wide (the same access
    /// with no name): a caller allowed on every TrainJob of the namespace, as the chart's
    /// `hold-caller` ClusterRole bound in a namespace allows, costs one review per namespace,
    /// not one per TrainJob — a wave over a node's jobs would otherwise send the apiserver a
    /// review for every job. Only when that is refused (a grant limited by `resourceNames`)
    /// is the TrainJob itself reviewed.
    pub async fn authorize(&self, caller: &Caller, access: &Access) -> Result<(), Refusal> {
        if access.name.is_some() {
            let namespace_wide = Access {
                name: None,
                ..access.clone()
            };
            if self.authorize_one(caller, &namespace_wide).await.is_ok() {
                return Ok(());
            }
        }
        self.authorize_one(caller, access).await
    }

    /// Whether `caller` may make exactly `access`: a SubjectAccessReview, or its answer of
    /// the last few seconds.
    async fn authorize_one(&self, caller: &Caller, access: &Access) -> Result<(), Refusal> {
        let key = (caller.clone(), access.clone());
        if let Some(answer) = remembered(&self.grants, &key) {
            return answer.map_err(Refusal::Forbidden);
        }
        let _permit = self
            .budget
            .review_permit(false)
            .await
            .map_err(Refusal::Shed)?;
        let answer = self.review_access(caller, access).await?;
        remember(&self.grants, key, answer.clone());
        answer.map_err(Refusal::Forbidden)
    }

    /// The apiserver's answer on `token` (`Err(Refusal)`: it could not be asked).
    async fn review_token(&self, token: &str) -> Result<Answer<Caller>, Refusal> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
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
            return Ok(Err(format!(
                "the token was not accepted{}{}",
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default(),
                self.audience_hint()
            )));
        }
        // The apiserver answers the audiences the token is valid for among those asked; an
        // authenticator that ignores audiences may answer none: not ours, then.
        if !self.audiences.is_empty()
            && !status
                .audiences
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|a| self.audiences.contains(a))
        {
            return Ok(Err(format!(
                "the token is not meant for the hold API: it must carry the audience {}",
                self.audiences.join(" or ")
            )));
        }
        let user = status.user.unwrap_or_default();
        let Some(username) = user.username.filter(|u| !u.is_empty()) else {
            return Ok(Err("the token names no user".into()));
        };
        Ok(Ok(Caller {
            username,
            uid: user.uid,
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }

    /// What a refused caller is told about the audiences, when some are required.
    fn audience_hint(&self) -> String {
        if self.audiences.is_empty() {
            return String::new();
        }
        format!(
            " (the hold API accepts only tokens for the audience {}: e.g. `kubectl create token SERVICEACCOUNT --audience {}`)",
            self.audiences.join(" or "),
            self.audiences[0]
        )
    }

    /// The apiserver's answer on `caller` making the call (`Err(Refusal)`: it could not be
    /// asked).
    async fn review_access(&self, caller: &Caller, access: &Access) -> Result<Answer<()>, Refusal> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.username.clone()),
                uid: caller.uid.clone(),
                groups: Some(caller.groups.clone()),
                extra: Some(caller.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(GROUP.to_owned()),
                    resource: Some(access.resource.to_owned()),
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
            Ok(Ok(()))
        } else {
            Ok(Err(format!(
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
    let mut s = format!(
        "{} {GROUP} {}/{}",
        access.verb, access.resource, access.subresource
    );
    match (&access.namespace, &access.name) {
        (Some(ns), Some(name)) => s.push_str(&format!(" of {ns}/{name}")),
        (Some(ns), None) => s.push_str(&format!(" in {ns}")),
        (None, Some(name)) => s.push_str(&format!(" of {name}")),
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
            resource: RESOURCE,
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

    #[test]
    fn a_name_no_object_can_have_is_refused_before_any_review() {
        let access = |ns: &str, name: Option<&str>| Access {
            verb: "get",
            resource: RESOURCE,
            subresource: "status",
            namespace: Some(ns.to_owned()),
            name: name.map(str::to_owned),
        };
        let longest = [
            &"x".repeat(63)[..],
            &"x".repeat(63),
            &"x".repeat(63),
            &"x".repeat(61),
        ]
        .join(".");
        assert_eq!(longest.len(), 253);
        for ok in [
            access("team-a", Some("mnist")),
            access("a", Some("a.b-1")),
            access(&"n".repeat(63), Some(&longest)),
            access("team-a", None),
        ] {
            assert!(check_names(&ok).is_ok(), "{ok:?}");
        }
        let long_path = "x".repeat(400_000);
        for bad in [
            access("Team-A", Some("mnist")),
            access("team-a.b", Some("mnist")),
            access(&"n".repeat(64), Some("mnist")),
            access("-a", Some("mnist")),
            access("team-a", Some("")),
            access("team-a", Some("MNIST")),
            access("team-a", Some("a..b")),
            access("team-a", Some(&format!("{longest}x"))),
            access("team-a", Some(&"x".repeat(64))),
            access("team-a", Some(&long_path)),
            access("", None),
        ] {
            let err = check_names(&bad).expect_err("refused");
            assert_eq!(err.status(), 400, "{bad:?}");
            assert_eq!(err.kind(), "Invalid");
            assert!(
                err.to_string().len() < 300,
                "the message does not echo the path"
            );
        }
    }
}
