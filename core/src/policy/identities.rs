//! The identities the policy trusts, matched by user name (for service accounts
//! `system:serviceaccount:{namespace}:{name}`). Groups are not consulted: membership in
//! `system:masters` or any other group grants nothing here.

use std::collections::BTreeSet;

/// The Kubernetes garbage collector's identity (kube-controller-manager, with
/// `--use-service-account-credentials`, which every mainstream distribution sets).
pub const GARBAGE_COLLECTOR: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
/// The namespace controller's identity (deletes everything in a terminating namespace).
pub const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// Who may write what the policy protects.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Identities {
    /// holdfast's controller: writes hold state, opened, attempt, and snapshots.
    pub controller: BTreeSet<String>,
    /// May also create snapshot ConfigMaps (Kubeflow Trainer's controller).
    pub snapshot_creators: BTreeSet<String>,
    /// May also delete snapshot ConfigMaps (garbage collector, namespace controller).
    pub snapshot_deleters: BTreeSet<String>,
    /// Kueue's controller: the only writer of a TrainJob's `spec.suspend` in kueue mode.
    pub kueue: BTreeSet<String>,
}

/// Trims each name and drops empty ones, so that an empty list entry (`FOO_USERS=` or a
/// trailing comma) never matches a request whose user name is empty.
fn clean<I, S>(names: I) -> BTreeSet<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    names
        .into_iter()
        .map(|s| s.as_ref().trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn contains(set: &BTreeSet<String>, user: &str) -> bool {
    !user.is_empty() && set.contains(user)
}

impl Identities {
    pub fn new<I1, I2, I3, I4, S1, S2, S3, S4>(
        controller: I1,
        snapshot_creators: I2,
        snapshot_deleters: I3,
        kueue: I4,
    ) -> Self
    where
        I1: IntoIterator<Item = S1>,
        I2: IntoIterator<Item = S2>,
        I3: IntoIterator<Item = S3>,
        I4: IntoIterator<Item = S4>,
        S1: AsRef<str>,
        S2: AsRef<str>,
        S3: AsRef<str>,
        S4: AsRef<str>,
    {
        Identities {
            controller: clean(controller),
            snapshot_creators: clean(snapshot_creators),
            snapshot_deleters: clean(snapshot_deleters),
            kueue: clean(kueue),
        }
    }

    /// The user names listed both as holdfast's controller and as Kueue. The two must stay
    /// apart: in kueue mode only Kueue writes a TrainJob's `spec.suspend` and the controller
    /// never does, and several rules refuse Kueue what they let the controller do (a marked
    /// or gated unsuspend) or the reverse. One identity in both lists would be judged by the
    /// webhook and the admission policies differently, and could unsuspend a held job; the
    /// webhook refuses to start with such a list, and the chart to render it.
    pub fn controller_and_kueue(&self) -> Vec<&str> {
        self.controller
            .intersection(&self.kueue)
            .map(String::as_str)
            .collect()
    }

    pub fn is_controller(&self, user: &str) -> bool {
        contains(&self.controller, user)
    }

    pub fn is_kueue(&self, user: &str) -> bool {
        contains(&self.kueue, user)
    }

    /// A snapshot deleter proper (not counting the controller).
    pub fn is_snapshot_deleter(&self, user: &str) -> bool {
        contains(&self.snapshot_deleters, user)
    }

    /// The controller or a snapshot creator.
    pub fn may_create_snapshot(&self, user: &str) -> bool {
        self.is_controller(user) || contains(&self.snapshot_creators, user)
    }

    /// The controller or a snapshot deleter.
    pub fn may_delete_snapshot(&self, user: &str) -> bool {
        self.is_controller(user) || self.is_snapshot_deleter(user)
    }

    pub(crate) fn describe_controller(&self) -> String {
        format!("the holdfast controller ({})", list(&self.controller))
    }

    pub(crate) fn describe_kueue(&self) -> String {
        format!("Kueue ({})", list(&self.kueue))
    }

    pub(crate) fn describe_creators(&self) -> String {
        format!(
            "the holdfast controller ({}) and the snapshot creators ({})",
            list(&self.controller),
            list(&self.snapshot_creators)
        )
    }

    pub(crate) fn describe_deleters(&self) -> String {
        format!(
            "the holdfast controller ({}) and the snapshot deleters ({})",
            list(&self.controller),
            list(&self.snapshot_deleters)
        )
    }
}

fn list(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "none configured".to_owned()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_entries_never_match_an_empty_user() {
        let who = Identities::new(["", " "], [""], ["\t"], [""]);
        assert!(who.controller.is_empty());
        assert!(!who.is_controller(""));
        assert!(!who.may_create_snapshot(""));
        assert!(!who.may_delete_snapshot(""));
        assert!(!who.is_kueue(""));
    }

    #[test]
    fn roles_match_by_exact_user_name() {
        let who = Identities::new(["c"], ["t"], [GARBAGE_COLLECTOR], ["k"]);
        assert!(who.is_controller("c"));
        assert!(!who.is_controller("C"));
        assert!(who.may_create_snapshot("c") && who.may_create_snapshot("t"));
        assert!(!who.may_create_snapshot(GARBAGE_COLLECTOR));
        assert!(who.may_delete_snapshot("c") && who.may_delete_snapshot(GARBAGE_COLLECTOR));
        assert!(!who.may_delete_snapshot("t"));
        assert!(who.is_kueue("k") && !who.is_kueue("c"));
    }

    #[test]
    fn an_empty_list_is_described_as_none_configured() {
        let who = Identities::default();
        assert_eq!(who.describe_kueue(), "Kueue (none configured)");
    }

    #[test]
    fn a_user_listed_as_controller_and_as_kueue_is_named() {
        let apart = Identities::new(["c", "ops"], [""], [""], ["k"]);
        assert!(apart.controller_and_kueue().is_empty());
        let both = Identities::new(["c", "ops", "k2"], [""], [""], ["k", " ops ", "k2"]);
        assert_eq!(both.controller_and_kueue(), vec!["k2", "ops"]);
    }
}
