//! The MultiKueue workers holdfast sees: a client per worker, from a kubeconfig of holdfast's
//! own (the chart's `multikueue.workers`), named as the manager's `MultiKueueCluster` for it.
//!
//! The readmission gate in the manager counts the previous execution's pods in every one of
//! them ([`Workers::remaining`]): MultiKueue deletes a stopped job's copy in the worker while
//! its pods may still be terminating, and clears the worker's name from the Workload at
//! eviction, so every worker holdfast knows is asked, and one that cannot be read keeps the
//! gate closed. The hold executor lets Hold, Release and Open of a TrainJob under MultiKueue
//! go ahead only where these names cover the queue's `MultiKueueConfig`
//! (`holdfast_core::readmission::multikueue::coverage`).
//!
//! The credential needs, in each worker, `list` on pods, `batch` Jobs and JobSets in the
//! namespaces holdfast serves: the pods are found by ownership
//! (`holdfast_core::execution`), as in one cluster. The runtime snapshot the gate carries
//! into the workers needs more (`crate::multikueue_snapshot`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use holdfast_cluster::{queues::Queues, resources};
use holdfast_core::readmission::multikueue::{
    Coverage, UnderMultiKueue, config_of_check, coverage,
};
use kube::api::{Api, DynamicObject};

use crate::pods;

/// How long one worker's reads may take before the worker counts as unreachable.
pub const WORKER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The workers holdfast has a kubeconfig for, by `MultiKueueCluster` name. Cheap to clone.
#[derive(Clone, Default)]
pub struct Workers(Arc<BTreeMap<String, kube::Client>>);

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Workers").field(&self.names()).finish()
    }
}

/// What the workers say of an execution's pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerPods {
    /// The pods that remain, each as `worker/pod`.
    pub remain: Vec<String>,
    /// The workers that could not be read, each as `worker: why`.
    pub unreachable: Vec<String>,
}

impl Workers {
    /// Workers of the given clients.
    pub fn new(clients: BTreeMap<String, kube::Client>) -> Self {
        Workers(Arc::new(clients))
    }

    /// Workers from `NAME=PATH` pairs, each a kubeconfig file (its current context). A file
    /// that cannot be read or used fails the start, naming it.
    pub async fn from_kubeconfigs(specs: &[String]) -> anyhow::Result<Self> {
        let mut clients = BTreeMap::new();
        for spec in specs {
            let (name, path) = parse_spec(spec)?;
            let client = client_from(Path::new(path))
                .await
                .with_context(|| format!("MultiKueue worker {name}: kubeconfig {path}"))?;
            if clients.insert(name.to_owned(), client).is_some() {
                anyhow::bail!("MultiKueue worker {name} is given twice");
            }
        }
        Ok(Workers::new(clients))
    }

    /// The workers' names.
    pub fn names(&self) -> BTreeSet<String> {
        self.0.keys().cloned().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each worker's name and client.
    pub fn clients(&self) -> impl Iterator<Item = (&str, &kube::Client)> {
        self.0.iter().map(|(n, c)| (n.as_str(), c))
    }

    /// The client of worker `name`, if holdfast has a kubeconfig for it.
    pub fn client(&self, name: &str) -> Option<&kube::Client> {
        self.0.get(name)
    }

    /// The pods of TrainJob `namespace/name`'s executions that remain in each worker, found
    /// by ownership as in one cluster, and the workers that could not be read within
    /// [`WORKER_READ_TIMEOUT`].
    pub async fn remaining(&self, namespace: &str, name: &str) -> WorkerPods {
        let reads = self.0.iter().map(|(worker, client)| async move {
            let read = tokio::time::timeout(
                WORKER_READ_TIMEOUT,
                pods::remaining_with(client, namespace, name),
            )
            .await;
            (worker, read)
        });
        let mut out = WorkerPods::default();
        for (worker, read) in futures::future::join_all(reads).await {
            match read {
                Ok(Ok(found)) => out
                    .remain
                    .extend(found.into_iter().map(|p| format!("{worker}/{}", p.name))),
                Ok(Err(e)) => out.unreachable.push(format!("{worker}: {e}")),
                Err(_) => out.unreachable.push(format!(
                    "{worker}: no answer in {}s",
                    WORKER_READ_TIMEOUT.as_secs()
                )),
            }
        }
        out
    }
}

/// Whether `workers` cover every cluster a job `under` MultiKueue may run in: those of the
/// MultiKueueConfig of its ClusterQueue's MultiKueue check (the check as watched in `queues`,
/// the config read now through `client`).
pub async fn coverage_of(
    client: &kube::Client,
    queues: Option<&Queues>,
    workers: &Workers,
    under: &UnderMultiKueue,
) -> Coverage {
    if workers.is_empty() {
        return Coverage::NoWorkers;
    }
    let UnderMultiKueue::Queue { check, .. } = under else {
        return Coverage::Unknown(
            "its ClusterQueue does not list MultiKueue's AdmissionCheck, or is not known yet"
                .to_owned(),
        );
    };
    let Some(found) = queues.and_then(|q| q.admission_check(check)) else {
        return Coverage::Unknown(format!("AdmissionCheck {check} is not known yet"));
    };
    let Some(config) = config_of_check(&found) else {
        return Coverage::Unknown(format!(
            "AdmissionCheck {check} names no MultiKueueConfig in spec.parameters"
        ));
    };
    let configs: Api<DynamicObject> =
        Api::all_with(client.clone(), &resources::multikueue_config());
    match configs.get_opt(config).await {
        Ok(Some(found)) => match serde_json::to_value(&found) {
            Ok(value) => coverage(config, &value, &workers.names()),
            Err(e) => Coverage::Unknown(format!("MultiKueueConfig {config}: {e}")),
        },
        Ok(None) => Coverage::Unknown(format!("MultiKueueConfig {config} does not exist")),
        Err(e) => Coverage::Unknown(format!("reading MultiKueueConfig {config}: {e}")),
    }
}

/// `NAME=PATH`, both non-empty.
fn parse_spec(spec: &str) -> anyhow::Result<(&str, &str)> {
    match spec.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => Ok((name, path)),
        _ => anyhow::bail!(
            "--multikueue-worker {spec:?}: expected NAME=PATH, the MultiKueueCluster's name and a kubeconfig file"
        ),
    }
}

async fn client_from(path: &Path) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.connect_timeout = Some(WORKER_READ_TIMEOUT);
    config.read_timeout = Some(WORKER_READ_TIMEOUT);
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_is_given_as_its_name_and_a_kubeconfig_path() {
        assert_eq!(
            parse_spec("worker-1=/etc/holdfast/multikueue/worker-1/kubeconfig").ok(),
            Some(("worker-1", "/etc/holdfast/multikueue/worker-1/kubeconfig"))
        );
        for bad in ["worker-1", "=/x", "worker-1=", ""] {
            let e = parse_spec(bad).expect_err(bad).to_string();
            assert!(e.contains("expected NAME=PATH"), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn a_kubeconfig_that_cannot_be_read_fails_the_start_naming_the_worker() {
        let e = Workers::from_kubeconfigs(&["worker-1=/nonexistent/kubeconfig".to_owned()])
            .await
            .expect_err("no such file");
        let text = format!("{e:#}");
        assert!(
            text.contains("MultiKueue worker worker-1: kubeconfig /nonexistent/kubeconfig"),
            "{text}"
        );
        let none = Workers::from_kubeconfigs(&[]).await.expect("no workers");
        assert!(none.is_empty());
        assert!(none.remaining("ns", "job").await == WorkerPods::default());
    }
}
