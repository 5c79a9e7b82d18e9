//! The bearer token, obtained as kubectl obtains it: kube's own client configuration reads the
//! kubeconfig (`--kubeconfig`, else `KUBECONFIG`, else ~/.kube/config, else the pod's
//! ServiceAccount) and kube's own auth layer yields the `Authorization` header it would send to
//! the apiserver — a static token, a token file, an exec credential plugin's token or an
//! auth-provider's OIDC token (refreshed here when it has expired: [`crate::oidc`]). The hold API authenticates bearer tokens only, so a user whose
//! kubeconfig yields a client certificate (or a password) is told so, and what to do instead.

use std::path::PathBuf;

use kube::client::ConfigExt;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tower::{ServiceBuilder, ServiceExt, service_fn};

use crate::kubeconfig_file::{self, Selected};
use crate::oidc::{self, OidcError};

/// Which kubeconfig, context and user.
#[derive(Clone, Debug, Default)]
pub struct KubeSelection {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub user: Option<String>,
}

const USE_A_TOKEN: &str = "the hold API authenticates bearer tokens only: use a kubeconfig user \
     with a token, a token file, an exec plugin that prints a token or an oidc auth-provider, \
     or a ServiceAccount's \
     token (`kubectl create token SERVICEACCOUNT -n NAMESPACE`, then --token or \
     HOLDFAST_TOKEN)";

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("no kube configuration: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("obtaining the kubeconfig user's credentials: {0}")]
    Auth(#[source] kube::Error),
    #[error("reading the token file {path}: {source}")]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Oidc(#[from] OidcError),
    #[error("the credential plugin or token refresh failed: {0}")]
    Refresh(String),
    #[error(
        "the kubeconfig user authenticates with a client certificate, not a token; {USE_A_TOKEN}"
    )]
    ClientCertificate,
    #[error(
        "the kubeconfig user authenticates with a username and password, not a token; {USE_A_TOKEN}"
    )]
    Basic,
    #[error(
        "the kubeconfig user's exec plugin gave a client certificate (or nothing), not a token; {USE_A_TOKEN}"
    )]
    ExecWithoutToken,
    #[error("the kubeconfig user has no credentials; {USE_A_TOKEN}")]
    None,
}

/// kube's client configuration for `sel`, as kubectl would resolve it.
pub async fn kube_config(sel: &KubeSelection) -> Result<kube::Config, CredentialsError> {
    let options = KubeConfigOptions {
        context: sel.context.clone(),
        cluster: None,
        user: sel.user.clone(),
    };
    Ok(match &sel.kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if options.context.is_none() && options.user.is_none() => {
            kube::Config::infer().await?
        }
        None => kube::Config::from_kubeconfig(&options).await?,
    })
}

/// `config` with an `oidc` auth-provider replaced by its id-token, refreshed first if it has
/// expired, so that the kube client and the hold API call send the same token and the issuer
/// is asked once. A refreshed token is written back to the kubeconfig, as kubectl does; if
/// that fails the run goes on with a warning.
pub async fn with_oidc_id_token(
    config: &mut kube::Config,
    sel: &KubeSelection,
) -> Result<(), CredentialsError> {
    let Some(provider) = config
        .auth_info
        .auth_provider
        .as_ref()
        .filter(|p| p.name == "oidc")
    else {
        return Ok(());
    };
    let token = match oidc::usable(&provider.config, jiff::Timestamp::now()) {
        Some(token) => token,
        None => refresh_oidc(&provider.config, sel).await?,
    };
    config.auth_info.auth_provider = None;
    config.auth_info.token = Some(token.into());
    Ok(())
}

/// A refreshed id-token, under the kubeconfig's lock: first read again from the file, where
/// a run that held the lock meanwhile may have written a fresh one (its refresh token is then
/// spent, if the issuer rotates them); refreshed with the file's refresh token otherwise, and
/// written back. Without the lock (no file defines the user, or another process kept it)
/// the token is refreshed and not written back, with a warning.
async fn refresh_oidc(
    config: &std::collections::HashMap<String, String>,
    sel: &KubeSelection,
) -> Result<String, CredentialsError> {
    let selected = Selected {
        kubeconfig: sel.kubeconfig.as_deref(),
        context: sel.context.as_deref(),
        user: sel.user.as_deref(),
    };
    let not_written = |e: anyhow::Error| {
        eprintln!(
            "holdfast: warning: the refreshed oidc id-token was not written back to the kubeconfig ({e:#}): it still holds the old tokens"
        );
    };
    let locked = match kubeconfig_file::lock(selected, kubeconfig_file::LOCK_WAIT).await {
        Ok(locked) => locked,
        Err(e) => {
            let refreshed = oidc::refreshed(config).await?;
            not_written(e);
            return Ok(refreshed.id_token);
        }
    };
    let current = locked.config().unwrap_or_else(|e| {
        eprintln!(
            "holdfast: warning: reading the kubeconfig again ({e:#}); using the tokens read first"
        );
        config.clone()
    });
    if let Some(token) = oidc::usable(&current, jiff::Timestamp::now()) {
        return Ok(token);
    }
    // Interrupted while it holds the lock (Ctrl-C), the run removes the lock before it ends:
    // a lock left behind would make kubectl's own write-backs fail until removed by hand.
    let refreshed = tokio::select! {
        refreshed = oidc::refreshed(&current) => refreshed?,
        _ = tokio::signal::ctrl_c() => {
            drop(locked);
            eprintln!("holdfast: interrupted while refreshing the oidc id-token");
            std::process::exit(130);
        }
    };
    if let Err(e) = locked.write_back(&refreshed) {
        not_written(e);
    }
    Ok(refreshed.id_token)
}

/// The bearer token kube would send to the apiserver with `config` (running exec plugins and
/// refreshing tokens as it would).
pub async fn bearer_token(config: &kube::Config) -> Result<String, CredentialsError> {
    let config = &with_token_file_read(config)?;
    let Some(layer) = config.auth_layer().map_err(CredentialsError::Auth)? else {
        return Err(without_token(config));
    };
    let header = ServiceBuilder::new()
        .layer(layer)
        .service(service_fn(|req: http::Request<String>| async move {
            let header = req.headers().get(http::header::AUTHORIZATION).cloned();
            Ok::<_, tower::BoxError>(http::Response::new(header))
        }))
        .oneshot(http::Request::new(String::new()))
        .await
        .map_err(|e| CredentialsError::Refresh(e.to_string()))?;
    let value = header.into_body().ok_or_else(|| without_token(config))?;
    let value = value.to_str().map_err(|_| CredentialsError::None)?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
            Ok(token.trim().to_owned())
        }
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("basic") => Err(CredentialsError::Basic),
        _ => Err(CredentialsError::None),
    }
}

/// `config` with a token file's token read and trimmed, as client-go does (kube sends the
/// file's bytes as they are, so the newline `kubectl create token > FILE` leaves would make
/// an invalid header).
fn with_token_file_read(config: &kube::Config) -> Result<kube::Config, CredentialsError> {
    let mut config = config.clone();
    let a = &mut config.auth_info;
    if let (None, Some(file)) = (&a.token, &a.token_file) {
        let token =
            std::fs::read_to_string(file).map_err(|source| CredentialsError::TokenFile {
                path: file.clone(),
                source,
            })?;
        a.token = Some(token.trim().to_owned().into());
        a.token_file = None;
    }
    Ok(config)
}

/// Why a configuration with no `Authorization` header has no token.
fn without_token(config: &kube::Config) -> CredentialsError {
    let a = &config.auth_info;
    let certificate = a.client_certificate.is_some()
        || a.client_certificate_data.is_some()
        || a.client_key.is_some()
        || a.client_key_data.is_some();
    if certificate {
        CredentialsError::ClientCertificate
    } else if a.exec.is_some() {
        CredentialsError::ExecWithoutToken
    } else {
        CredentialsError::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\nusers:\n- name: alice\n  user:\n    token: s3cret\n- name: bob\n  user:\n    tokenFile: TOKEN_FILE\n- name: carol\n  user:\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n- name: dave\n  user:\n    username: dave\n    password: pw\ncontexts:\n- name: a\n  context:\n    cluster: c\n    user: alice\n- name: b\n  context:\n    cluster: c\n    user: bob\ncurrent-context: a\n";

    async fn token(
        path: &std::path::Path,
        context: Option<&str>,
        user: Option<&str>,
    ) -> Result<String, CredentialsError> {
        let config = kube_config(&KubeSelection {
            kubeconfig: Some(path.to_owned()),
            context: context.map(str::to_owned),
            user: user.map(str::to_owned),
        })
        .await?;
        bearer_token(&config).await
    }

    #[tokio::test]
    async fn the_selected_users_token_is_used_and_a_certificate_user_is_told_to_use_a_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "from-file\n").expect("write");
        let text = KUBECONFIG.replace("TOKEN_FILE", &token_file.display().to_string());
        let path = dir.path().join("config");
        std::fs::write(&path, &text).expect("write");

        assert_eq!(token(&path, None, None).await.expect("token"), "s3cret");
        assert_eq!(
            token(&path, Some("b"), None).await.expect("token"),
            "from-file"
        );
        assert!(matches!(
            token(&path, Some("nope"), None).await,
            Err(CredentialsError::Kubeconfig(_))
        ));
        let carol = token(&path, None, Some("carol")).await;
        assert!(
            matches!(carol, Err(CredentialsError::ClientCertificate)),
            "{carol:?}"
        );
        let message = carol.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("kubectl create token"), "{message}");
        let dave = token(&path, None, Some("dave")).await;
        assert!(matches!(dave, Err(CredentialsError::Basic)), "{dave:?}");
    }
}
