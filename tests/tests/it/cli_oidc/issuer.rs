//! A tiny OpenID Connect issuer on loopback TLS, as much of one as the apiserver and a
//! kubeconfig's `oidc` auth-provider use: the discovery document, the JWKS (one ES256 key,
//! signed with `ring`), and a token endpoint that honours `grant_type=refresh_token` for the
//! public client [`CLIENT_ID`], rotating refresh tokens as Dex does (a used one is spent).
//! It records every refresh token presented to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use holdfast_certs::CertificateAuthority;
use holdfast_serve::TlsServer;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The client the kubeconfig names and the apiserver expects as the audience.
pub const CLIENT_ID: &str = "holdfast-cli";
const KEY_ID: &str = "test-key-1";

pub struct Issuer {
    /// `https://127.0.0.1:PORT`: the issuer URL (the `iss` of its tokens).
    pub url: String,
    /// The CA of its serving certificate, PEM.
    pub ca_pem: String,
    state: Arc<Mutex<Tokens>>,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

struct Tokens {
    issuer: String,
    key: EcdsaKeyPair,
    /// Refresh tokens not yet spent, and whose they are.
    refresh: HashMap<String, String>,
    /// Every refresh token presented at the token endpoint, in order.
    presented: Vec<String>,
    issued: u32,
    /// How long the token endpoint takes to answer (after it has spent the refresh token).
    delay: Duration,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl Tokens {
    /// An ID token for `subject` with audience [`CLIENT_ID`], issued `iat` and expiring `exp`
    /// (Unix seconds), signed ES256.
    fn id_token(&self, subject: &str, iat: i64, exp: i64) -> String {
        let header = json!({"alg": "ES256", "typ": "JWT", "kid": KEY_ID});
        let claims = json!({"iss": self.issuer, "sub": subject, "aud": CLIENT_ID,
            "iat": iat, "exp": exp});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("sign");
        format!("{input}.{}", b64(signature.as_ref()))
    }

    fn new_refresh_token(&mut self, subject: &str) -> String {
        self.issued += 1;
        let token = format!("refresh-{subject}-{}", self.issued);
        self.refresh.insert(token.clone(), subject.to_owned());
        token
    }

    fn jwks(&self) -> Value {
        // The uncompressed point: 0x04 || X || Y.
        let point = self.key.public_key().as_ref();
        json!({"keys": [{"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256",
            "kid": KEY_ID, "x": b64(&point[1..33]), "y": b64(&point[33..65])}]})
    }
}

impl Issuer {
    pub async fn start() -> Issuer {
        holdfast_serve::install_crypto_provider();
        let ca = CertificateAuthority::generate("test-oidc-issuer-ca", Duration::from_secs(3600))
            .expect("CA");
        let cert = ca
            .issue_serving(&["127.0.0.1".into()], Duration::from_secs(3600))
            .expect("serving certificate");
        let (files, dir) =
            holdfast_tests::serving_files::write(&cert).expect("write the certificate");
        let server = TlsServer::bind("127.0.0.1:0".parse().expect("addr"), files)
            .await
            .expect("bind");
        let url = format!(
            "https://127.0.0.1:{}",
            server.local_addr().expect("addr").port()
        );
        let rng = SystemRandom::new();
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .expect("key pair");
        let state = Arc::new(Mutex::new(Tokens {
            issuer: url.clone(),
            key,
            refresh: HashMap::new(),
            presented: Vec::new(),
            issued: 0,
            delay: Duration::ZERO,
        }));
        let router = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/keys", get(keys))
            .route("/token", post(token))
            .with_state(state.clone());
        let stop = CancellationToken::new();
        tokio::spawn(server.serve(router, stop.clone()));
        Issuer {
            url,
            ca_pem: ca.cert_pem().to_owned(),
            state,
            stop,
            _dir: dir,
        }
    }

    fn tokens(&self) -> std::sync::MutexGuard<'_, Tokens> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A signed ID token for `subject`, expiring `exp_in_seconds` from now (negative: expired).
    pub fn id_token(&self, subject: &str, exp_in_seconds: i64) -> String {
        let now = jiff::Timestamp::now().as_second();
        self.tokens()
            .id_token(subject, now - 1200, now + exp_in_seconds)
    }

    /// A valid refresh token for `subject`.
    pub fn refresh_token(&self, subject: &str) -> String {
        self.tokens().new_refresh_token(subject)
    }

    /// Makes the token endpoint answer `delay` after it spent the refresh token (a slow
    /// issuer: runs that start together then overlap).
    pub fn set_token_delay(&self, delay: Duration) {
        self.tokens().delay = delay;
    }

    /// Every refresh token presented at the token endpoint so far, in order.
    pub fn presented(&self) -> Vec<String> {
        self.tokens().presented.clone()
    }
}

type Shared = State<Arc<Mutex<Tokens>>>;

async fn discovery(State(state): Shared) -> Json<Value> {
    let issuer = state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .issuer
        .clone();
    Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/auth"),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/keys"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
    }))
}

async fn keys(State(state): Shared) -> Json<Value> {
    Json(state.lock().unwrap_or_else(|p| p.into_inner()).jwks())
}

/// The token endpoint: `application/x-www-form-urlencoded`, a public client naming itself.
/// The test's tokens and client id are URL-safe, so no percent-decoding is needed.
async fn token(State(state): Shared, body: String) -> (StatusCode, Json<Value>) {
    let (delay, answer) = {
        let mut tokens = state.lock().unwrap_or_else(|p| p.into_inner());
        (tokens.delay, token_answer(&mut tokens, &body))
    };
    tokio::time::sleep(delay).await;
    answer
}

fn token_answer(tokens: &mut Tokens, body: &str) -> (StatusCode, Json<Value>) {
    let form: HashMap<&str, &str> = body.split('&').filter_map(|p| p.split_once('=')).collect();
    let refused = |error: &str, description: &str| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": error, "error_description": description})),
        )
    };
    if form.get("grant_type") != Some(&"refresh_token") {
        return refused(
            "unsupported_grant_type",
            "only refresh_token is served here",
        );
    }
    if form.get("client_id") != Some(&CLIENT_ID) {
        return refused("invalid_client", "unknown client");
    }
    let presented = form.get("refresh_token").copied().unwrap_or_default();
    tokens.presented.push(presented.to_owned());
    let Some(subject) = tokens.refresh.remove(presented) else {
        return refused("invalid_grant", "the refresh token is invalid or spent");
    };
    let now = jiff::Timestamp::now().as_second();
    let id_token = tokens.id_token(&subject, now, now + 600);
    let refresh_token = tokens.new_refresh_token(&subject);
    (
        StatusCode::OK,
        Json(
            json!({"access_token": "opaque", "token_type": "Bearer", "expires_in": 600,
            "id_token": id_token, "refresh_token": refresh_token}),
        ),
    )
}
