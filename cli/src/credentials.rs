//! The bearer token: given, or the kubeconfig's current user's.

use std::path::Path;

use kube::config::Kubeconfig;
use secrecy::ExposeSecret;

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("the kubeconfig has no current context")]
    NoContext,
    #[error("the kubeconfig has no context {0:?}")]
    MissingContext(String),
    #[error("the kubeconfig's user {0:?} has no bearer token (token or tokenFile); pass --token")]
    NoToken(String),
    #[error("reading the token file {path}: {source}")]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
}

/// The current context's user's bearer token, from `path` or (with `None`) the default
/// kubeconfig (`KUBECONFIG`, `~/.kube/config`).
pub fn kubeconfig_token(path: Option<&Path>) -> Result<String, CredentialsError> {
    let kc = match path {
        Some(p) => Kubeconfig::read_from(p)?,
        None => Kubeconfig::read()?,
    };
    token_of(&kc)
}

fn token_of(kc: &Kubeconfig) -> Result<String, CredentialsError> {
    let context_name = kc
        .current_context
        .clone()
        .ok_or(CredentialsError::NoContext)?;
    let user = kc
        .contexts
        .iter()
        .find(|c| c.name == context_name)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone())
        .ok_or_else(|| CredentialsError::MissingContext(context_name.clone()))?;
    let auth = kc
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref())
        .ok_or_else(|| CredentialsError::NoToken(user.clone()))?;
    if let Some(token) = &auth.token {
        return Ok(token.expose_secret().trim().to_owned());
    }
    if let Some(file) = &auth.token_file {
        return std::fs::read_to_string(file)
            .map(|t| t.trim().to_owned())
            .map_err(|source| CredentialsError::TokenFile {
                path: file.clone(),
                source,
            });
    }
    Err(CredentialsError::NoToken(user))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\nusers:\n- name: alice\n  user:\n    token: s3cret\n- name: bob\n  user:\n    tokenFile: TOKEN_FILE\ncontexts:\n- name: a\n  context:\n    cluster: c\n    user: alice\n- name: b\n  context:\n    cluster: c\n    user: bob\ncurrent-context: a\n";

    #[test]
    fn the_current_users_token_is_used() {
        let dir = tempfile::tempdir().expect("tempdir");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "from-file\n").expect("write");
        let text = KUBECONFIG.replace("TOKEN_FILE", &token_file.display().to_string());
        let path = dir.path().join("config");
        std::fs::write(&path, &text).expect("write");
        assert_eq!(kubeconfig_token(Some(&path)).expect("token"), "s3cret");

        let mut kc = Kubeconfig::read_from(&path).expect("kubeconfig");
        kc.current_context = Some("b".into());
        assert_eq!(token_of(&kc).expect("token"), "from-file");
        kc.current_context = Some("nope".into());
        assert!(matches!(
            token_of(&kc),
            Err(CredentialsError::MissingContext(_))
        ));
    }
}
