//! Which kinds are runtimes: the only kinds whose objects holdfast reads, watches and copies
//! into snapshots.
//!
//! A `runtimeRef` is the user's to write, so it can name any kind — `ConfigMap`, `Pod`,
//! `Secret`. Following it blindly would make the controller watch every object of that kind
//! cluster-wide, and the webhook cache a discovery answer per invented kind. A kind is a
//! runtime when it is Kubeflow Trainer's `TrainingRuntime` or `ClusterTrainingRuntime`, or its
//! resource is one the operator listed (chart value `runtimes.extra`, flag
//! `--extra-runtime-resources group/plural,...`), which is also exactly what holdfast's RBAC
//! lets it read. Everything else is refused before any request is made.

use std::collections::BTreeSet;

use crate::names::TRAINER_GROUP;

/// The resources of Trainer's own runtime kinds.
pub const TRAINER_RUNTIME_RESOURCES: [&str; 2] = ["trainingruntimes", "clustertrainingruntimes"];

/// The runtime resources, by API group and plural.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeResources {
    resources: BTreeSet<(String, String)>,
}

impl Default for RuntimeResources {
    fn default() -> Self {
        RuntimeResources {
            resources: TRAINER_RUNTIME_RESOURCES
                .iter()
                .map(|r| (TRAINER_GROUP.to_owned(), (*r).to_owned()))
                .collect(),
        }
    }
}

impl RuntimeResources {
    /// Trainer's two kinds and `extra`, each `group/plural` (e.g.
    /// `slurm.example.com/slurmruntimes`; a core resource would be `/plural`). A malformed
    /// entry is an error naming it.
    pub fn with_extra<I, S>(extra: I) -> Result<Self, String>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = RuntimeResources::default();
        for entry in extra {
            let entry = entry.as_ref().trim();
            if entry.is_empty() {
                continue;
            }
            let Some((group, plural)) = entry.rsplit_once('/') else {
                return Err(format!(
                    "runtime resource {entry:?} is not group/plural (e.g. slurm.example.com/slurmruntimes)"
                ));
            };
            if plural.is_empty() || plural.contains('.') {
                return Err(format!(
                    "runtime resource {entry:?} has no plural resource name"
                ));
            }
            out.resources.insert((group.to_owned(), plural.to_owned()));
        }
        Ok(out)
    }

    /// Whether any runtime resource lives in API group `group` (before discovery: a group
    /// with none is not even looked up).
    pub fn has_group(&self, group: &str) -> bool {
        self.resources.iter().any(|(g, _)| g == group)
    }

    /// Whether resource `plural` of `group` is a runtime.
    pub fn allows(&self, group: &str, plural: &str) -> bool {
        self.resources
            .contains(&(group.to_owned(), plural.to_owned()))
    }

    /// The groups with runtime resources.
    pub fn groups(&self) -> BTreeSet<&str> {
        self.resources.iter().map(|(g, _)| g.as_str()).collect()
    }

    /// What to tell a user whose `runtimeRef` names something else.
    pub fn refusal(&self, group: &str, kind: &str) -> String {
        let known: Vec<String> = self
            .resources
            .iter()
            .map(|(g, p)| format!("{p}.{g}"))
            .collect();
        format!(
            "kind {kind} of API group {group:?} is not a runtime holdfast reads (runtime resources: {}); an operator adds other runtime kinds with the chart value runtimes.extra",
            known.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_trainer_runtimes_and_listed_resources_are_runtimes() {
        let r =
            RuntimeResources::with_extra(["slurm.example.com/slurmruntimes", " "]).expect("valid");
        assert!(r.allows(TRAINER_GROUP, "clustertrainingruntimes"));
        assert!(r.allows(TRAINER_GROUP, "trainingruntimes"));
        assert!(r.allows("slurm.example.com", "slurmruntimes"));
        assert!(!r.allows(TRAINER_GROUP, "trainjobs"));
        assert!(!r.allows("", "configmaps"));
        assert!(!r.has_group(""), "the core group holds no runtime");
        assert!(!r.has_group("apps"));
        assert!(r.has_group("slurm.example.com"));
        assert!(r.refusal("", "ConfigMap").contains("runtimes.extra"));
    }

    #[test]
    fn malformed_entries_are_named() {
        for bad in ["slurmruntimes", "slurm.example.com/", "a/b.c"] {
            let e = RuntimeResources::with_extra([bad]).expect_err("malformed");
            assert!(e.contains(bad), "{e}");
        }
    }
}
