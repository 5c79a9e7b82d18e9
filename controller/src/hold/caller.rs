//! Who makes a hold-family call: the username a Hold records as its holder, and how to learn,
//! only when a decision needs it, whether the caller may override another holder's hold.

use std::sync::Arc;

use futures::future::BoxFuture;
use holdfast_core::hold::CallerId;

/// The username of the Rust API's calls that name no caller ([`super::HoldExecutor::call`]):
/// one identity, so that holds placed through one executor in process are released through
/// it. The hold API always names the authenticated caller instead.
pub const IN_PROCESS_CALLER: &str = "system:holdfast:in-process";

/// Asks whether the caller may override another holder's hold (`create` on `holdfast.dev`
/// `trainjobs/override` of the TrainJob): `Ok(())` when allowed, else why not (the
/// authorizer's refusal, or why it could not be asked), which the refusal then quotes.
pub type AskOverride = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Whether a caller may override another holder's hold.
#[derive(Clone)]
pub enum Overrides {
    /// Never (the in-process caller's default).
    Never,
    /// Always (known beforehand).
    Always,
    /// Ask, when a call would otherwise be refused `NotHolder`, and only then.
    Ask(AskOverride),
}

/// A caller of Hold and Release: its authenticated username, and whether it may override.
#[derive(Clone)]
pub struct CallerIdentity {
    pub username: String,
    pub overrides: Overrides,
}

impl CallerIdentity {
    /// `username`, who may not override.
    pub fn new(username: impl Into<String>) -> Self {
        CallerIdentity {
            username: username.into(),
            overrides: Overrides::Never,
        }
    }

    /// `username`, asked through `ask` whether it may override when a call needs it.
    pub fn asking(username: impl Into<String>, ask: AskOverride) -> Self {
        CallerIdentity {
            username: username.into(),
            overrides: Overrides::Ask(ask),
        }
    }

    /// `username`, who may override.
    pub fn overrider(username: impl Into<String>) -> Self {
        CallerIdentity {
            username: username.into(),
            overrides: Overrides::Always,
        }
    }

    /// The Rust API's caller when none is named: [`IN_PROCESS_CALLER`], who may not override.
    pub fn in_process() -> Self {
        CallerIdentity::new(IN_PROCESS_CALLER)
    }

    /// The caller as the state machine sees it before anything is asked.
    pub fn id(&self) -> CallerId {
        let id = CallerId::new(self.username.clone());
        match self.overrides {
            Overrides::Always => id.overriding(),
            Overrides::Never | Overrides::Ask(_) => id,
        }
    }

    /// Whether the caller may override: `Ok(())`, or why not.
    pub async fn may_override(&self) -> Result<(), String> {
        match &self.overrides {
            Overrides::Always => Ok(()),
            Overrides::Never => Err(format!("{} may not override", self.username)),
            Overrides::Ask(ask) => ask().await,
        }
    }
}

impl std::fmt::Debug for CallerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let overrides = match self.overrides {
            Overrides::Never => "never",
            Overrides::Always => "always",
            Overrides::Ask(_) => "ask",
        };
        f.debug_struct("CallerIdentity")
            .field("username", &self.username)
            .field("overrides", &overrides)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn override_is_known_or_asked() {
        assert!(!CallerIdentity::in_process().id().may_override);
        assert!(CallerIdentity::in_process().may_override().await.is_err());
        let admin = CallerIdentity::overrider("platform-admin");
        assert!(admin.id().may_override);
        assert_eq!(admin.may_override().await, Ok(()));
        let asked = CallerIdentity::asking(
            "alice",
            Arc::new(|| Box::pin(async { Err("alice may not".to_owned()) })),
        );
        assert!(!asked.id().may_override, "not granted before it is asked");
        assert_eq!(asked.may_override().await, Err("alice may not".to_owned()));
    }
}
