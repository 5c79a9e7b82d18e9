//! Writing a refreshed OIDC `id-token` (and a rotated `refresh-token`) back into the
//! kubeconfig file that defines the user, as kubectl does. Without it an issuer that rotates
//! refresh tokens (Dex does by default) would leave the file with a spent one, and kubectl
//! would then ask the user to log in again.
//!
//! The file is the one named by `--kubeconfig`, else the first file of `KUBECONFIG` that
//! defines the user, else ~/.kube/config. It is rewritten whole (as kubectl rewrites it:
//! comments are not kept) through a temporary file renamed over it, with its permissions.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use kube::config::Kubeconfig;
use serde_json::Value;

use crate::oidc::{ID_TOKEN, REFRESH_TOKEN, Refreshed};

/// Which kubeconfig file, context and user (`--kubeconfig`, `--context`, `--user`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Selected<'a> {
    pub kubeconfig: Option<&'a Path>,
    pub context: Option<&'a str>,
    pub user: Option<&'a str>,
}

/// Writes `refreshed` into the selected user's `auth-provider` config; the file written.
pub fn write_back(sel: Selected<'_>, refreshed: &Refreshed) -> anyhow::Result<PathBuf> {
    let user = user_name(sel)?;
    for path in candidates(sel) {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let mut doc: Value =
            serde_saphyr::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        if set_tokens(&mut doc, &user, refreshed) {
            write(&path, &doc)?;
            return Ok(path);
        }
    }
    Err(anyhow!(
        "no kubeconfig file defines user {user} with an oidc auth-provider"
    ))
}

/// The user the selection resolves to, as kube resolved it.
fn user_name(sel: Selected<'_>) -> anyhow::Result<String> {
    if let Some(user) = sel.user {
        return Ok(user.to_owned());
    }
    let kc = match sel.kubeconfig {
        Some(path) => Kubeconfig::read_from(path)?,
        None => Kubeconfig::read()?,
    };
    let context = sel
        .context
        .map(str::to_owned)
        .or(kc.current_context)
        .ok_or_else(|| anyhow!("the kubeconfig has no current context"))?;
    kc.contexts
        .into_iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context)
        .and_then(|c| c.user)
        .ok_or_else(|| anyhow!("context {context} names no user"))
}

fn candidates(sel: Selected<'_>) -> Vec<PathBuf> {
    if let Some(path) = sel.kubeconfig {
        return vec![path.to_owned()];
    }
    match std::env::var_os("KUBECONFIG") {
        Some(list) if !list.is_empty() => std::env::split_paths(&list)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        _ => std::env::home_dir()
            .map(|h| h.join(".kube").join("config"))
            .into_iter()
            .collect(),
    }
}

/// Sets the tokens in `users[name == user].user.auth-provider.config` if that user has an
/// oidc auth-provider; whether it did.
fn set_tokens(doc: &mut Value, user: &str, refreshed: &Refreshed) -> bool {
    let config = doc
        .get_mut("users")
        .and_then(Value::as_array_mut)
        .and_then(|users| {
            users
                .iter_mut()
                .find(|u| u.get("name").and_then(Value::as_str) == Some(user))
        })
        .and_then(|u| u.get_mut("user"))
        .and_then(|u| u.get_mut("auth-provider"))
        .filter(|p| p.get("name").and_then(Value::as_str) == Some("oidc"))
        .and_then(|p| p.get_mut("config"))
        .and_then(Value::as_object_mut);
    let Some(config) = config else {
        return false;
    };
    config.insert(ID_TOKEN.into(), refreshed.id_token.clone().into());
    if let Some(token) = &refreshed.refresh_token {
        config.insert(REFRESH_TOKEN.into(), token.clone().into());
    }
    true
}

fn write(path: &Path, doc: &Value) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let text = serde_saphyr::to_string(doc)?;
    // A symlinked kubeconfig is written where it points: replacing the link with a file would
    // leave the spent refresh token in its target.
    let path =
        &std::fs::canonicalize(path).with_context(|| format!("resolving {}", path.display()))?;
    let permissions = std::fs::metadata(path)?.permissions();
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".holdfast-{}.tmp", std::process::id()));
    let temporary = PathBuf::from(temporary);
    // Created new (never following or reusing something already there) and with the file's
    // own mode from the first byte, so the tokens are never readable by anyone the kubeconfig
    // is not.
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(permissions.mode() & 0o777)
        .open(&temporary)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        })
        .and_then(|()| std::fs::set_permissions(&temporary, permissions))
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\nusers:\n- name: jane\n  user:\n    auth-provider:\n      name: oidc\n      config:\n        client-id: kubectl\n        id-token: old-id\n        refresh-token: old-refresh\n        idp-issuer-url: https://127.0.0.1:5556\n- name: tok\n  user:\n    token: s3cret\ncontexts:\n- name: a\n  context:\n    cluster: c\n    user: jane\n- name: b\n  context:\n    cluster: c\n    user: tok\ncurrent-context: a\n";

    #[test]
    fn a_refreshed_token_is_written_into_the_selected_users_auth_provider_and_nowhere_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).expect("write");
        let sel = Selected {
            kubeconfig: Some(&path),
            ..Default::default()
        };
        let refreshed = Refreshed {
            id_token: "new-id".into(),
            refresh_token: Some("new-refresh".into()),
        };
        assert_eq!(write_back(sel, &refreshed).expect("written"), path);
        let kc = Kubeconfig::read_from(&path).expect("still a kubeconfig");
        let user = |name: &str| {
            kc.auth_infos
                .iter()
                .find(|u| u.name == name)
                .and_then(|u| u.auth_info.clone())
                .expect("user")
        };
        let config = user("jane").auth_provider.expect("auth-provider").config;
        assert_eq!(config.get(ID_TOKEN).map(String::as_str), Some("new-id"));
        assert_eq!(
            config.get(REFRESH_TOKEN).map(String::as_str),
            Some("new-refresh")
        );
        assert_eq!(config.get("client-id").map(String::as_str), Some("kubectl"));
        assert!(user("tok").token.is_some());
        assert_eq!(kc.current_context.as_deref(), Some("a"));

        // A user without an oidc auth-provider is not written.
        let sel = Selected {
            kubeconfig: Some(&path),
            context: Some("b"),
            ..Default::default()
        };
        assert!(write_back(sel, &refreshed).is_err());
    }

    #[test]
    fn a_symlinked_kubeconfig_is_written_where_it_points_with_its_own_mode() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("real-config");
        std::fs::write(&target, KUBECONFIG).expect("write");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let link = dir.path().join("config");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let sel = Selected {
            kubeconfig: Some(&link),
            ..Default::default()
        };
        let refreshed = Refreshed {
            id_token: "new-id".into(),
            refresh_token: None,
        };
        write_back(sel, &refreshed).expect("written");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink(),
            "the link stays a link"
        );
        let text = std::fs::read_to_string(&target).expect("target");
        assert!(text.contains("new-id"), "{text}");
        let mode = std::fs::metadata(&target)
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
