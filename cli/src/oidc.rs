//! A kubeconfig user of the form `auth-provider: {name: oidc, config: {...}}` (Dex, Keycloak
//! and other on-prem issuers, as `kubectl oidc-login`-less setups write it): its `id-token`,
//! refreshed as kubectl refreshes it when it has expired.
//!
//! The refresh is done here rather than by kube's `oidc` feature, which trusts only the
//! system's roots (not the kubeconfig's `idp-certificate-authority[-data]`, which on-prem
//! issuers need) and requires a `client-secret` (public clients have none). It is done once per
//! run, and the fresh token replaces the auth-provider in the configuration: the kube client
//! (finding the hold API, listing held jobs) and the hold API call then send the same token, and
//! an issuer that rotates refresh tokens never sees the old one twice. As kubectl does, the new
//! `id-token` and `refresh-token` are written back to the kubeconfig file the user came from
//! (see [`crate::kubeconfig_file`]).

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

/// Why no usable id-token could be had.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error(
        "the oidc auth-provider's id-token has expired (or is not a JWT) and the kubeconfig user has no {0} to refresh it with: log in again"
    )]
    CannotRefresh(&'static str),
    #[error("refreshing the oidc id-token with the issuer {issuer}: {cause}")]
    Refresh { issuer: String, cause: String },
}

/// The auth-provider's keys, as kubectl names them.
pub const ID_TOKEN: &str = "id-token";
pub const REFRESH_TOKEN: &str = "refresh-token";
const ISSUER: &str = "idp-issuer-url";
const CLIENT_ID: &str = "client-id";
const CLIENT_SECRET: &str = "client-secret";
const CA_FILE: &str = "idp-certificate-authority";
const CA_DATA: &str = "idp-certificate-authority-data";

/// A token this close to its expiry is refreshed first (as kube and client-go leave a margin
/// for the request in flight).
const MARGIN: Duration = Duration::from_secs(10);
/// Each call to the issuer (discovery, token endpoint) is bounded.
pub const ISSUER_TIMEOUT: Duration = Duration::from_secs(30);

/// What the issuer returned: the refreshed `id-token` and (if the issuer rotated it) `refresh-token`, to write back.
#[derive(Debug, PartialEq, Eq)]
pub struct Refreshed {
    pub id_token: String,
    pub refresh_token: Option<String>,
}

/// The `config`'s id-token if it can be sent as it is: a JWT that does not expire within
/// [`MARGIN`] of `now`.
pub fn usable(config: &HashMap<String, String>, now: jiff::Timestamp) -> Option<String> {
    config
        .get(ID_TOKEN)
        .filter(|t| !t.is_empty())
        .filter(|t| expiry(t).is_some_and(|exp| now + MARGIN < exp))
        .cloned()
}

/// A new id-token (and maybe refresh token) from the issuer, with `config`'s refresh token.
pub async fn refreshed(config: &HashMap<String, String>) -> Result<Refreshed, OidcError> {
    let field = |key: &'static str| {
        config
            .get(key)
            .filter(|v| !v.is_empty())
            .ok_or(OidcError::CannotRefresh(key))
    };
    let refresh_token = field(REFRESH_TOKEN)?;
    let issuer = field(ISSUER)?;
    let client_id = field(CLIENT_ID)?;
    let client_secret = config.get(CLIENT_SECRET).filter(|s| !s.is_empty());
    let http = issuer_client(config).map_err(|e| refresh_error(issuer, e))?;
    refresh(&http, issuer, client_id, client_secret, refresh_token)
        .await
        .map_err(|e| refresh_error(issuer, e))
}

fn refresh_error(issuer: &str, e: anyhow::Error) -> OidcError {
    OidcError::Refresh {
        issuer: issuer.to_owned(),
        cause: format!("{e:#}"),
    }
}

/// The `exp` claim of a JWT, read without verifying it (the apiserver verifies; this only
/// decides whether to refresh). `None` when it is not a JWT with a numeric `exp`.
fn expiry(token: &str) -> Option<jiff::Timestamp> {
    let payload = token.split('.').nth(1)?;
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let claims: Value = serde_json::from_slice(&engine.decode(payload).ok()?).ok()?;
    let exp = claims.get("exp")?.as_f64()?;
    if !exp.is_finite() {
        return None;
    }
    // `as` saturates: an `exp` far outside jiff's range stays outside it, and is None.
    jiff::Timestamp::from_second(exp as i64).ok()
}

/// The HTTPS client for the issuer: trusting `idp-certificate-authority[-data]` if given (as
/// well as the built-in roots, as client-go does), else the built-in roots; it follows no
/// redirect.
fn issuer_client(config: &HashMap<String, String>) -> anyhow::Result<reqwest::Client> {
    use anyhow::Context;
    let pem = match (config.get(CA_DATA), config.get(CA_FILE)) {
        (Some(data), _) if !data.is_empty() => Some((
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .with_context(|| format!("{CA_DATA} is not base64"))?,
            CA_DATA.to_owned(),
        )),
        (_, Some(file)) if !file.is_empty() => Some((
            std::fs::read(file).with_context(|| format!("reading {CA_FILE} {file}"))?,
            format!("{CA_FILE} {file}"),
        )),
        _ => None,
    };
    // No redirects: the refresh token is posted to the token endpoint the discovery document
    // names and nowhere else (a 307 would re-send the form to wherever it points).
    let mut http = reqwest::Client::builder()
        .timeout(ISSUER_TIMEOUT)
        .https_only(true)
        .redirect(reqwest::redirect::Policy::none());
    if let Some((pem, from)) = pem {
        let certificates = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("{from} is not PEM certificates"))?;
        if certificates.is_empty() {
            anyhow::bail!("{from} holds no certificate");
        }
        for c in certificates {
            http = http.add_root_certificate(c);
        }
    }
    Ok(http.build()?)
}

/// The refresh-token grant (RFC 6749 §6) at the token endpoint the issuer's discovery
/// document names. A confidential client authenticates with HTTP Basic, a public client
/// (no `client-secret`) names itself in the form.
async fn refresh(
    http: &reqwest::Client,
    issuer: &str,
    client_id: &str,
    client_secret: Option<&String>,
    refresh_token: &str,
) -> anyhow::Result<Refreshed> {
    use anyhow::{Context, bail};
    let discovery = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let resp = http
        .get(&discovery)
        .send()
        .await
        .with_context(|| format!("reading {discovery}"))?;
    let status = resp.status();
    if !status.is_success() {
        bail!("{discovery} answered {status}");
    }
    let document: Value = resp
        .json()
        .await
        .with_context(|| format!("{discovery} is not JSON"))?;
    let Some(endpoint) = document.get("token_endpoint").and_then(Value::as_str) else {
        bail!("{discovery} names no token_endpoint");
    };
    let mut form = vec![
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
    ];
    let mut req = http.post(endpoint);
    match client_secret {
        Some(secret) => req = req.basic_auth(client_id, Some(secret)),
        None => form.push(("client_id", client_id)),
    }
    let resp = req
        .form(&form)
        .send()
        .await
        .with_context(|| format!("calling the token endpoint {endpoint}"))?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        // The OAuth error (RFC 6749 §5.2), e.g. invalid_grant for an expired or revoked
        // refresh token.
        let error = body.get("error").and_then(Value::as_str).unwrap_or("");
        let description = body
            .get("error_description")
            .and_then(Value::as_str)
            .unwrap_or("");
        bail!(
            "the token endpoint {endpoint} refused the refresh token ({status}{}{}{}): log in again to get a new one",
            if error.is_empty() { "" } else { ": " },
            error,
            if description.is_empty() {
                String::new()
            } else {
                format!(", {description}")
            }
        );
    }
    let Some(id_token) = body.get("id_token").and_then(Value::as_str) else {
        bail!("the token endpoint {endpoint} answered without an id_token");
    };
    Ok(Refreshed {
        id_token: id_token.to_owned(),
        refresh_token: body
            .get("refresh_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty() && *t != refresh_token)
            .map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &Value) -> String {
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!(
            "{}.{}.c2ln",
            engine.encode(br#"{"alg":"ES256"}"#),
            engine.encode(claims.to_string())
        )
    }

    #[tokio::test]
    async fn a_valid_id_token_is_used_as_it_is_and_an_expired_one_without_a_refresh_token_is_an_error()
     {
        let now = jiff::Timestamp::now();
        let valid = jwt(&serde_json::json!({"exp": now.as_second() + 600}));
        let config = HashMap::from([(ID_TOKEN.to_owned(), valid.clone())]);
        assert_eq!(usable(&config, now), Some(valid));

        // Within the margin, expired, or no JWT at all: a refresh is needed, and without a
        // refresh token the error names what is missing.
        for token in [
            jwt(&serde_json::json!({"exp": now.as_second() + 5})),
            jwt(&serde_json::json!({"exp": now.as_second() - 5})),
            jwt(&serde_json::json!({"sub": "no-exp"})),
            "not-a-jwt".to_owned(),
        ] {
            let config = HashMap::from([(ID_TOKEN.to_owned(), token.clone())]);
            assert_eq!(usable(&config, now), None, "{token}");
            let err = refreshed(&config).await.expect_err(&token);
            assert!(
                matches!(err, OidcError::CannotRefresh(REFRESH_TOKEN)),
                "{token}: {err:?}"
            );
            assert!(err.to_string().contains("refresh-token"), "{err}");
        }
        let config = HashMap::from([(REFRESH_TOKEN.to_owned(), "r".to_owned())]);
        let err = refreshed(&config).await.expect_err("no issuer");
        assert!(matches!(err, OidcError::CannotRefresh(ISSUER)), "{err:?}");
    }
}
