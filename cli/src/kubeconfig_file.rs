//! Writing a refreshed OIDC `id-token` (and a rotated `refresh-token`) back into the
//! kubeconfig file that defines the user, as kubectl does. Without it an issuer that rotates
//! refresh tokens (Dex does by default) would leave the file with a spent one, and kubectl
//! would then ask the user to log in again.
//!
//! The file is the one named by `--kubeconfig`, else the first file of `KUBECONFIG` that
//! defines the user, else ~/.kube/config. It is rewritten whole (as kubectl rewrites it:
//! comments are not kept) through a temporary file renamed over it, with its permissions.
//!
//! The refresh and the write are made under the file's lock, the one client-go takes
//! (`<file>.lock`, created exclusively and removed after), so kubectl and other runs never
//! write the file at once; and the lock's holder reads the tokens again first: a run that
//! waited for another's refresh uses the token that run wrote instead of presenting a refresh
//! token the issuer has already rotated away.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
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

/// How long a run waits for another's lock on the kubeconfig: longer than a holder of ours
/// may keep it (the issuer's discovery and token requests, each bounded by
/// [`crate::oidc::ISSUER_TIMEOUT`]), so that one still waited for past this has died and left
/// its lock behind.
pub const LOCK_WAIT: Duration = Duration::from_secs(2 * crate::oidc::ISSUER_TIMEOUT.as_secs() + 10);

/// The kubeconfig file that defines the selected user's `oidc` auth-provider, locked.
#[derive(Debug)]
pub struct Locked {
    path: PathBuf,
    user: String,
    lock: PathBuf,
}

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.lock);
    }
}

impl Locked {
    /// The user's auth-provider config as the file holds it now.
    pub fn config(&self) -> anyhow::Result<HashMap<String, String>> {
        let doc = read(&self.path)?;
        let config = provider_config(&doc, &self.user).ok_or_else(|| {
            anyhow!(
                "{} no longer defines user {}",
                self.path.display(),
                self.user
            )
        })?;
        Ok(config
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect())
    }

    /// Writes `refreshed` into the user's `auth-provider` config; the file written.
    pub fn write_back(&self, refreshed: &Refreshed) -> anyhow::Result<&Path> {
        let mut doc = read(&self.path)?;
        if !set_tokens(&mut doc, &self.user, refreshed) {
            bail!(
                "{} no longer defines user {}",
                self.path.display(),
                self.user
            );
        }
        write(&self.path, &doc)?;
        Ok(&self.path)
    }
}

/// Locks the kubeconfig file that defines the selected user with an `oidc` auth-provider,
/// waiting at most `wait` for another holder (kubectl, another run) to let go.
pub async fn lock(sel: Selected<'_>, wait: Duration) -> anyhow::Result<Locked> {
    let user = user_name(sel)?;
    let path = candidates(sel)
        .into_iter()
        .find(|path| read(path).is_ok_and(|doc| provider_config(&doc, &user).is_some()))
        .ok_or_else(|| {
            anyhow!("no kubeconfig file defines user {user} with an oidc auth-provider")
        })?;
    let mut lock = path.as_os_str().to_owned();
    lock.push(".lock");
    let lock = PathBuf::from(lock);
    let started = std::time::Instant::now();
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(_) => return Ok(Locked { path, user, lock }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if started.elapsed() >= wait {
                    bail!(
                        "{} has been locked for {}s by another process (kubectl or holdfast, longer than either keeps it): remove it if none is running",
                        lock.display(),
                        wait.as_secs()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(e).with_context(|| format!("creating the lock {}", lock.display()));
            }
        }
    }
}

fn read(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("reading {}", path.display()))
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

/// `users[name == user].user.auth-provider.config`, if that user has an oidc auth-provider.
fn provider_config<'a>(doc: &'a Value, user: &str) -> Option<&'a serde_json::Map<String, Value>> {
    doc.get("users")
        .and_then(Value::as_array)?
        .iter()
        .find(|u| u.get("name").and_then(Value::as_str) == Some(user))?
        .get("user")?
        .get("auth-provider")
        .filter(|p| p.get("name").and_then(Value::as_str) == Some("oidc"))?
        .get("config")?
        .as_object()
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

    /// A directory holding `config`, written from [`KUBECONFIG`].
    fn kubeconfig() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        std::fs::write(&path, KUBECONFIG).expect("write");
        (dir, path)
    }

    async fn write_back(sel: Selected<'_>, refreshed: &Refreshed) -> anyhow::Result<PathBuf> {
        let locked = lock(sel, LOCK_WAIT).await?;
        locked.write_back(refreshed).map(Path::to_owned)
    }

    #[tokio::test]
    async fn a_refreshed_token_is_written_into_the_selected_users_auth_provider_and_nowhere_else() {
        let (_dir, path) = kubeconfig();
        let sel = Selected {
            kubeconfig: Some(&path),
            ..Default::default()
        };
        let refreshed = Refreshed {
            id_token: "new-id".into(),
            refresh_token: Some("new-refresh".into()),
        };
        assert_eq!(write_back(sel, &refreshed).await.expect("written"), path);
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
        assert!(write_back(sel, &refreshed).await.is_err());
    }

    #[tokio::test]
    async fn a_symlinked_kubeconfig_is_written_where_it_points_with_its_own_mode() {
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
        write_back(sel, &refreshed).await.expect("written");
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

    #[tokio::test]
    async fn the_kubeconfig_is_locked_as_client_go_locks_it_and_the_holder_reads_the_tokens_again()
    {
        let (dir, path) = kubeconfig();
        let sel = Selected {
            kubeconfig: Some(&path),
            ..Default::default()
        };
        let lock_file = dir.path().join("config.lock");
        let first = lock(sel, LOCK_WAIT).await.expect("locked");
        assert!(lock_file.exists(), "client-go's lock file");
        assert_eq!(first.config().expect("config")[ID_TOKEN], "old-id");
        // A second run waits; while it waits, the first refreshes and writes.
        let waiting = {
            let path = path.clone();
            tokio::spawn(async move {
                let sel = Selected {
                    kubeconfig: Some(&path),
                    ..Default::default()
                };
                let second = lock(sel, LOCK_WAIT).await.expect("locked after the first");
                second.config().expect("config")
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "the second run waits for the lock");
        first
            .write_back(&Refreshed {
                id_token: "new-id".into(),
                refresh_token: Some("new-refresh".into()),
            })
            .expect("written");
        drop(first);
        let seen = waiting.await.expect("the second run");
        assert_eq!(
            seen[ID_TOKEN], "new-id",
            "the waiter reads what the holder wrote"
        );
        assert_eq!(seen[REFRESH_TOKEN], "new-refresh");
        assert!(!lock_file.exists(), "the lock is removed with its holder");

        // A lock nobody lets go of (a crashed kubectl): the wait ends with an error naming it.
        std::fs::write(&lock_file, "").expect("a stale lock");
        let err = lock(sel, Duration::from_millis(100))
            .await
            .expect_err("stale");
        assert!(err.to_string().contains("config.lock"), "{err}");
        assert!(lock_file.exists(), "someone else's lock is not removed");
    }
}
