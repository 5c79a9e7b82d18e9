//! The execution actor: at this tier there is no Trainer, no JobSet and no kubelet, so this
//! small loop plays all three for one namespace. It is honest about what they do, not about
//! how:
//!
//! - when it sees a TrainJob unsuspended (and not being deleted) while no execution of it is
//!   running, it starts the next execution: it creates two pods labelled as JobSet labels
//!   them (`jobset.sigs.k8s.io/jobset-name=<trainjob>`), plus the TrainJob's uid, the number
//!   of the execution it believes it is starting, and the resourceVersion of the TrainJob
//!   version it acted on; each owned by a Job whose JobSet the TrainJob owns, as Trainer,
//!   JobSet and the Job controller make them (`holdfast_tests::execution_owners`: the garbage
//!   collector deletes them with the TrainJob, and an orphaning delete leaves them), and each
//!   with a finalizer of its own;
//! - when it sees the TrainJob suspended, it deletes that execution's pods (JobSet suspends
//!   its Jobs, the Job controller deletes their pods);
//! - a deleted pod stays *terminating* (its finalizer) for a while — the first pod of an
//!   execution goes at once, the others after the sequence's `linger_ms` — as containers
//!   run out their grace period.
//!
//! Pods are never scheduled, so they stay `Pending`: until deleted, they remain.

use super::check::{ANN_POD_TRIGGER_RV, LABEL_JOBSET_NAME, LABEL_POD_EXECUTION, LABEL_POD_UID};
use super::history::rv_of;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The actor's finalizer on its pods.
pub const LINGER_FINALIZER: &str = "adversary.holdfast.test/linger";
/// How long a pod lingers, per pod.
pub const ANN_LINGER_MS: &str = "adversary.holdfast.test/linger-ms";
/// Pods per execution.
pub const PODS_PER_EXECUTION: usize = 2;

#[derive(Default)]
struct Job {
    executions: u32,
    running: Vec<String>,
    /// The `ownerReferences` of its pods: its Job, whose JobSet the TrainJob owns.
    owners: Option<Value>,
}

/// The running actor.
pub struct ExecutionActor {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl ExecutionActor {
    /// Starts it in `ns`, acting as `client` (Trainer's identity).
    pub fn start(client: kube::Client, ns: &str, linger: Duration) -> ExecutionActor {
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(client, ns.to_owned(), linger, stop.clone()));
        ExecutionActor { stop, task }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

async fn run(client: kube::Client, ns: String, linger: Duration, stop: CancellationToken) {
    let tjs: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &crate::objects::trainjob_resource());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut tj_events = std::pin::pin!(watcher(tjs, watcher::Config::default()));
    let mut pod_events = std::pin::pin!(watcher(pods.clone(), watcher::Config::default()));
    let mut jobs: HashMap<String, Job> = HashMap::new();
    let mut lingering: HashSet<String> = HashSet::new();
    let mut timers = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(ev) = tj_events.next() => {
                if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = ev
                    && let Ok(v) = serde_json::to_value(o)
                {
                    trainjob(&client, &ns, &pods, &mut jobs, &v, linger).await;
                }
            }
            Some(ev) = pod_events.next() => {
                if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    let ours = p.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == LINGER_FINALIZER));
                    if p.metadata.deletion_timestamp.is_some() && ours && lingering.insert(name.clone()) {
                        let ms = p.metadata.annotations.as_ref()
                            .and_then(|a| a.get(ANN_LINGER_MS))
                            .and_then(|s| s.parse::<u64>().ok())
                            .unwrap_or(0);
                        let pods = pods.clone();
                        timers.spawn(async move {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            let _ = pods
                                .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
                                .await;
                        });
                    }
                }
            }
            Some(_) = timers.join_next(), if !timers.is_empty() => {}
        }
    }
    timers.abort_all();
}

async fn trainjob(
    client: &kube::Client,
    ns: &str,
    pods: &Api<Pod>,
    jobs: &mut HashMap<String, Job>,
    tj: &Value,
    linger: Duration,
) {
    let uid = tj
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let name = tj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let suspended = tj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
    let deleting = tj
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    let job = jobs.entry(uid.clone()).or_default();
    if deleting {
        // The garbage collector deletes the pods with the TrainJob (or, for an orphaning
        // delete, leaves them running).
        job.running.clear();
        return;
    }
    if suspended && !job.running.is_empty() {
        for p in std::mem::take(&mut job.running) {
            let _ = pods.delete(&p, &DeleteParams::default()).await;
        }
        return;
    }
    if !suspended && job.running.is_empty() {
        // JobSet's part: the TrainJob's JobSet and its Job, which own the pods.
        if job.owners.is_none() {
            job.owners = crate::execution_owners::ensure(client, ns, &name, &uid)
                .await
                .ok();
        }
        let Some(owners) = job.owners.clone() else {
            return;
        };
        job.executions += 1;
        let n = job.executions;
        let short: String = uid.chars().take(5).collect();
        for i in 0..PODS_PER_EXECUTION {
            let pod_name = format!("{name}-e{n}-{i}-{short}");
            let linger_ms = if i == 0 { 0 } else { linger.as_millis() };
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "labels": {
                        LABEL_JOBSET_NAME: name,
                        LABEL_POD_UID: uid,
                        LABEL_POD_EXECUTION: n.to_string(),
                    },
                    "annotations": {
                        ANN_POD_TRIGGER_RV: rv_of(tj).to_string(),
                        ANN_LINGER_MS: linger_ms.to_string(),
                    },
                    "finalizers": [LINGER_FINALIZER],
                    "ownerReferences": owners,
                },
                "spec": {
                    "automountServiceAccountToken": false,
                    "containers": [{"name": "node", "image": "pytorch/pytorch:2.10.0"}],
                },
            });
            let Ok(pod) = serde_json::from_value::<Pod>(pod) else {
                continue;
            };
            if pods.create(&PostParams::default(), &pod).await.is_ok() {
                job.running.push(pod_name);
            }
        }
    }
}
